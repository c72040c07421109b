/** The client's companion calls against `user-memory serve` running the companion schema. */
import { describe, expect, it } from "vitest";
import { Client, ElementExists, InvalidDocument, NotFound, PreconditionFailed } from "user-memory-client";
import { COMPANION_API, newUser, tokenFor } from "./support.js";

const googleEvent = (id: string, start: string, end: string) => ({
  kind: "calendar#event",
  id,
  status: "confirmed",
  updated: "2026-05-02T08:00:00.000Z",
  summary: "Team lunch",
  start: { dateTime: start },
  end: { dateTime: end },
});

describe("the companion layer", () => {
  it("given a goal, a to-do and an event, when each is read, merged, completed and deleted, then each is a version and each mistake a typed error", async () => {
    const { companion } = new Client(COMPANION_API, tokenFor(newUser()));
    const goal = await companion.goals.create({ id: "g-run", title: "Run a half marathon", target_date: "2026-10-04" });
    const todo = await companion.todos.create({ id: "t-shoes", text: "Buy shoes", due_date: "2026-06-01", goal_id: "g-run" });
    const event = await companion.events.create(
      { id: "e-race", summary: "Race", start: "2026-10-04T09:00:00Z", end: "2026-10-04T12:00:00Z" },
      { ifMatch: 2 },
    );
    expect([goal.version, todo.version, event.version]).toEqual([1, 2, 3]);
    expect(goal.collection).toBe("goals");
    expect((await companion.goals.get("g-run")).element.title).toBe("Run a half marathon");
    const updated = await companion.todos.update("t-shoes", { text: "Buy running shoes", due_date: null }, { ifMatch: 3 });
    expect(updated.element?.text).toBe("Buy running shoes");
    const done = await companion.todos.complete("t-shoes");
    expect(done.element?.status).toBe("done");
    const again = await companion.todos.complete("t-shoes");
    expect([again.status, again.version]).toEqual(["unchanged", done.version]);
    expect((await companion.events.delete("e-race")).element ?? null).toBeNull();
    await expect(companion.events.get("e-race")).rejects.toBeInstanceOf(NotFound);
    await expect(companion.goals.create({ id: "g-run", title: "Another" })).rejects.toBeInstanceOf(ElementExists);
    await expect(companion.todos.update("t-shoes", { due_date: "next week" })).rejects.toBeInstanceOf(InvalidDocument);
    await expect(companion.goals.update("g-run", { title: "Walk" }, { ifMatch: 1 })).rejects.toBeInstanceOf(PreconditionFailed);
  });

  it("given imported events, goals and to-dos, when they are queried, then goals, due to-dos, every occurrence in a range, a rating and no digest yet", async () => {
    const { companion } = new Client(COMPANION_API, tokenFor(newUser()));
    await companion.goals.create({ id: "g1", title: "Read more", target_date: "2026-12-01" });
    await companion.todos.create({ id: "t1", text: "Library card", due_date: "2026-06-01" });
    await companion.todos.create({ id: "t2", text: "Return books", due_date: "2026-06-03" });
    const imported = await companion.events.importGoogle({
      items: [1, 2, 3].map((i) => googleEvent(`g${i}`, `2026-06-0${i}T12:00:00Z`, `2026-06-0${i}T13:00:00Z`)),
    });
    expect([imported.created, imported.version]).toEqual([3, 4]);
    expect((await companion.goals.active()).items.map((g) => g.element.title)).toEqual(["Read more"]);
    const due = await companion.todos.due({ on: "2026-06-02" });
    expect([due.overdue.map((t) => t.element.id), due.due, due.day]).toEqual([["t1"], [], "2026-06-02"]);
    const summaries: unknown[] = [];
    for await (const o of companion.events.iterBetween(new Date("2026-06-01T00:00:00Z"), new Date("2026-06-03T00:00:00Z"))) {
      summaries.push(o.event.summary);
    }
    expect(summaries).toEqual(["Team lunch", "Team lunch"]);
    expect((await companion.rate("i-1", 5, { tags: ["kind"] })).status).toBe("created");
    await expect(companion.digest()).rejects.toBeInstanceOf(NotFound);
  });
});
