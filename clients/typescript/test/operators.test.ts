/**
 * The calls that queue work and the operators' calls, against serve: API is `serve --worker` (a
 * worker queue of its own, drained in the server: a refresh and a run's undo run there),
 * COMPANION_API the same database without a worker queue.
 */
import { describe, expect, it } from "vitest";
import {
  Client,
  Forbidden,
  NotEnabled,
  NotFound,
  Unavailable,
  type ExportJob,
  type RunReport,
  type RunRevert,
} from "user-memory-client";
import { API, COMPANION_API, MisbehavingProxy, newUser, operatorToken, tokenFor } from "./support.js";

const once = { attempts: 1 };

/** `read()` again until `done(answer)`, at most `tries` times (the worker runs in the server). */
async function until<T>(read: () => Promise<T>, done: (answer: T) => boolean, tries = 100): Promise<T> {
  let answer = await read();
  for (let i = 1; i < tries && !done(answer); i++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    answer = await read();
  }
  return answer;
}

/** A user with one recorded activity, summarized by an on-demand refresh the worker ran: its run. */
async function aRefreshedUser(): Promise<{ user: string; client: Client; runKey: string; operator: Client }> {
  const user = newUser();
  const client = new Client(API, tokenFor(user));
  await client.activity.record([
    { source: "app", external_id: "1", kind: "note", occurred_at: new Date().toISOString(), payload: { text: "cello" } },
  ]);
  const queued = await client.memory.refresh();
  // The user's own version (a run key names a second: another test's user may share it).
  const head = await until(() => client.memory.get(), (m) => m.version >= 1);
  expect(head.source).toContain(queued.run_key);
  const operator = new Client(API, operatorToken());
  return { user, client, runKey: queued.run_key, operator };
}

describe("a refresh on demand", () => {
  it("given a deployment with a worker queue, when a user asks for a refresh twice, then it is queued once under an ondemand run key and the second answers with it", async () => {
    const user = newUser();
    const client = new Client(API, tokenFor(user));
    const first = await client.memory.refresh();
    expect(first.status).toBe("queued");
    expect(first.user_id).toBe(user);
    expect(first.run_key).toMatch(/^ondemand:/);
    const again = await client.memory.refresh();
    expect([again.status, again.run_key, again.next_allowed_at]).toEqual(["already_queued", first.run_key, first.next_allowed_at]);
  });

  it("given a user who asked for a refresh, when an operator asks for theirs, then it is the one queued; a user's token is Forbidden there", async () => {
    const user = newUser();
    const mine = await new Client(API, tokenFor(user)).memory.refresh();
    const operator = new Client(API, operatorToken());
    const theirs = await operator.admin.refresh(user);
    expect([theirs.status, theirs.run_key, theirs.user_id]).toEqual(["already_queued", mine.run_key, user]);
    await expect(new Client(API, tokenFor(newUser()), { retries: once }).admin.refresh(user)).rejects.toBeInstanceOf(Forbidden);
  });

  it("given a deployment without a worker queue, when a refresh is asked for, then NotEnabled (a NotFound, 404)", async () => {
    const client = new Client(COMPANION_API, tokenFor(newUser()), { retries: once });
    const error = await client.memory.refresh().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotEnabled);
    expect(error).toBeInstanceOf(NotFound);
    expect((error as NotEnabled).status).toBe(404);
  });

  it("given a proxy that answers 503 first, when a refresh is asked for, then it is retried with the same Idempotency-Key and queued", async () => {
    const proxy = await new MisbehavingProxy(API).start();
    try {
      proxy.cue("503");
      const client = new Client(proxy.url, tokenFor(newUser()), { retries: { backoff: 0.01, maxBackoff: 0.05 } });
      expect((await client.memory.refresh()).status).toBe("queued");
      const keys = proxy.seen.map((s) => s.headers["idempotency-key"]);
      expect(keys).toHaveLength(2);
      expect(keys[0]).toMatch(/^client:/);
      expect(keys[1]).toBe(keys[0]);
    } finally {
      await proxy.stop();
    }
  });
});

describe("runs", () => {
  it("given a run the worker wrote, when an operator reads it by its key (a colon in it), lists the runs and iterates them, then it is there with its totals", async () => {
    const { runKey, operator } = await aRefreshedUser();
    const run = await operator.runs.get(runKey);
    expect(run.run_key).toBe(runKey);
    expect(run.activities).toBeGreaterThanOrEqual(1);
    const page = await operator.runs.list({ limit: 100 });
    expect(page.items.map((r) => r.run_key)).toContain(runKey);
    const seen: RunReport[] = [];
    for await (const r of operator.runs.iter({ pageSize: 1 })) {
      seen.push(r);
      if (r.run_key === runKey) break;
    }
    expect(seen.at(-1)?.run_key).toBe(runKey);
    expect(new Set(seen.map((r) => r.run_key)).size).toBe(seen.length); // each run once across pages
  });

  it("given a run the worker wrote for a user, when an operator undoes it for that user, then the undo's status says the user was reverted and the run's summary is gone", async () => {
    const { user, client, runKey, operator } = await aRefreshedUser();
    const before = await client.memory.get();
    const started = await operator.runs.revert(runKey, { userId: user });
    expect([started.run_key, started.user_id]).toEqual([runKey, user]);
    const status = await until<RunRevert>(() => operator.runs.revertStatus(started.revert_id), (s) => s.done);
    expect([status.done, status.reverted, status.conflicts]).toEqual([true, 1, []]);
    const after = await client.memory.get();
    expect(after.version).toBe(before.version + 1);
    expect(after.source).toBe(`run-revert:${runKey}`);
    expect(before.document.summary).toMatch(/^Last active/); // the run's summary, gone after the undo
    expect(after.document.summary ?? "").not.toMatch(/^Last active/);
  });

  it("given a user's token, when the runs are listed or a revert's status read, then Forbidden; an unknown revert id is NotFound", async () => {
    const user = new Client(API, tokenFor(newUser()), { retries: once });
    await expect(user.runs.list()).rejects.toBeInstanceOf(Forbidden);
    await expect(user.runs.revert("daily:2026-11-21")).rejects.toBeInstanceOf(Forbidden);
    const operator = new Client(API, operatorToken(), { retries: once });
    await expect(operator.runs.revertStatus(newUser())).rejects.toBeInstanceOf(NotFound);
  });
});

describe("webhooks", () => {
  // serve keeps no Secrets Manager of its own: without --worker registering answers 503; with it,
  // moto (started in the server for its worker queue) holds the secret, so the whole life runs.
  it("given serve without a secret store, when an operator registers an endpoint, then Unavailable, and the list still answers", async () => {
    const operator = new Client(COMPANION_API, operatorToken(), { retries: once });
    await expect(operator.webhooks.register("https://example.com/hook")).rejects.toBeInstanceOf(Unavailable);
    expect(Array.isArray((await operator.webhooks.list()).webhooks)).toBe(true);
  });

  it("given an operator, when an endpoint is registered, read, listed, disabled, enabled and deleted, then each answer shows it so; then it is NotFound", async () => {
    const operator = new Client(API, operatorToken(), { retries: once });
    const created = await operator.webhooks.register("https://example.com/hook", { description: "the client's tests" });
    expect(created.secret).toMatch(/^whsec_/);
    const id = created.webhook.id;
    expect(await operator.webhooks.get(id)).toMatchObject({ id, url: "https://example.com/hook", enabled: true });
    expect((await operator.webhooks.list()).webhooks.map((w) => w.id)).toContain(id);
    expect((await operator.webhooks.disable(id)).enabled).toBe(false);
    expect((await operator.webhooks.enable(id)).enabled).toBe(true);
    expect(await operator.webhooks.delete(id)).toEqual({ id, deleted: true });
    await expect(operator.webhooks.get(id)).rejects.toBeInstanceOf(NotFound);
    await expect(operator.webhooks.disable(id)).rejects.toBeInstanceOf(NotFound);
    await expect(new Client(API, tokenFor(newUser()), { retries: once }).webhooks.list()).rejects.toBeInstanceOf(Forbidden);
  });
});

describe("exports and erasure", () => {
  const finished = (job: ExportJob) => job.status === "done" || job.status === "failed";

  it("given a user with a memory, when they start an export and poll it, then it is done with its lines and a URL", async () => {
    const user = newUser();
    const client = new Client(API, tokenFor(user));
    await client.memory.patch({ summary: "Keeps bees" });
    const started = await client.account.startExport();
    expect(started.user_id).toBe(user);
    const job = await until(() => client.account.exportJob(started.id), finished);
    expect(job.status).toBe("done");
    expect(job.lines).toBeGreaterThanOrEqual(1);
    expect(job.url).toBeTruthy();
    await expect(new Client(API, tokenFor(newUser()), { retries: once }).account.exportJob(started.id)).rejects.toBeInstanceOf(NotFound);
  });

  it("given a user, when an operator starts their export and polls it, then it is done; a user's token is Forbidden there", async () => {
    const user = newUser();
    await new Client(API, tokenFor(user)).memory.patch({ summary: "Runs marathons" });
    const operator = new Client(API, operatorToken());
    const started = await operator.admin.startExport(user);
    expect(started.user_id).toBe(user);
    const job = await until(() => operator.admin.exportJob(started.id), finished);
    expect(job.status).toBe("done");
    await expect(new Client(API, tokenFor(user), { retries: once }).admin.startExport(user)).rejects.toBeInstanceOf(Forbidden);
  });

  it("given a user who erases their account, when an operator lists that user's erasures, then the receipt erase() answered is there", async () => {
    const user = newUser();
    const client = new Client(API, tokenFor(user));
    await client.memory.patch({ summary: "Leaving" });
    const erased = await client.account.erase();
    expect(erased.user_id).toBe(user);
    expect(erased.receipt).toBeTruthy();
    const operator = new Client(API, operatorToken());
    const page = await operator.admin.erasures({ userId: user, limit: 10 });
    expect(page.receipts.map((r) => r.id)).toContain(erased.receipt?.id);
    const all: string[] = [];
    for await (const r of operator.admin.iterErasures({ userId: user, pageSize: 1 })) all.push(r.id);
    expect(all).toEqual(page.receipts.map((r) => r.id));
  });
});
