import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Client,
  ConfigurationError,
  DeadlineExceeded,
  InvalidPatch,
  NotFound,
  PreconditionFailed,
  TransportError,
  Unauthenticated,
  Unavailable,
  UnknownVersion,
  type RetryNotice,
} from "user-memory-client";
import { API, MisbehavingProxy, newUser, tokenFor } from "./support.js";

const quick = { attempts: 4, deadline: 20, timeout: 5, backoff: 0.01, maxBackoff: 0.05 };

describe("reading, editing and searching the memory", () => {
  it("given a new user, when they write by merge patch and JSON Patch, then the head, history and diff show both", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const first = await client.memory.patch({ summary: "Learns algebra in the evenings" });
    expect(first.status).toBe("written");
    const second = await client.memory.patch(
      [{ op: "add", path: "/safety_notes", value: "no late-night reminders" }],
      { ifMatch: first.version },
    );
    expect(second.version).toBe(first.version + 1);
    const head = await client.memory.get();
    expect(head.document).toMatchObject({ summary: "Learns algebra in the evenings", safety_notes: "no late-night reminders" });
    expect((await client.memory.get({ version: first.version })).document.safety_notes).not.toBe("no late-night reminders");
    const diff = await client.memory.diff(first.version, second.version);
    expect(diff.patch).toContainEqual(expect.objectContaining({ path: "/safety_notes" }));
    expect((await client.memory.changes(first.version)).version).toBe(second.version);
  });

  it("given a memory with many versions, when history is iterated, then every version comes once, newest first, across pages", async () => {
    const client = new Client(API, tokenFor(newUser()));
    for (let i = 1; i <= 5; i++) await client.memory.patch({ summary: `step ${i}` });
    const versions: number[] = [];
    for await (const item of client.memory.iterHistory({ pageSize: 2 })) versions.push(item.version);
    expect(versions).toEqual([5, 4, 3, 2, 1]);
  });

  it("given a memory, when it is searched and rendered for a prompt, then the hit and the text name what was written", async () => {
    const client = new Client(API, tokenFor(newUser()));
    await client.memory.patch({ summary: "Practises the cello on Sundays" });
    const found = await client.memory.search("cello");
    expect(found.items.map((h) => h.path)).toContain("/summary");
    const prompt = await client.memory.prompt({ budgetTokens: 200 });
    expect(prompt.text).toContain("cello");
  });

  it("given key-value entries over several pages, when a namespace is iterated with a prefix, then each entry under it comes once in key order", async () => {
    const client = new Client(API, tokenFor(newUser()));
    for (const key of ["food/a", "food/b", "food/c", "other/x"]) await client.kv.put("prefs", key, { key });
    const keys: string[] = [];
    for await (const entry of client.kv.iter("prefs", { prefix: "food/", pageSize: 2 })) keys.push(entry.key);
    expect(keys).toEqual(["food/a", "food/b", "food/c"]);
    expect((await client.kv.delete("prefs", "food/a")).deleted).toBe(true);
    await expect(client.kv.get("prefs", "food/a")).rejects.toBeInstanceOf(NotFound);
  });
});

describe("errors", () => {
  it("given a version that does not exist, when it is read, then UnknownVersion (a NotFound) carries the problem and the request id", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const err = await client.memory.get({ version: 99 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownVersion);
    expect(err).toBeInstanceOf(NotFound);
    const known = err as UnknownVersion;
    expect(known.status).toBe(404);
    expect(known.type).toMatch(/unknown-version$/);
    expect(known.requestId).toBeTruthy();
  });

  it("given a patch that is not a JSON Patch, when it is sent, then InvalidPatch", async () => {
    const client = new Client(API, tokenFor(newUser()));
    await expect(client.memory.patch([{ op: "jump", path: "/summary" } as never])).rejects.toBeInstanceOf(InvalidPatch);
  });

  it("given a token signed with another secret, when a call is made, then Unauthenticated", async () => {
    const client = new Client(API, tokenFor(newUser(), { secret: "another-secret-of-at-least-32-bytes-long" }));
    await expect(client.memory.get()).rejects.toBeInstanceOf(Unauthenticated);
  });

  it.each(["localhost:8080", "127.0.0.1:8080", "api.example.com", "ftp://example.com", ""])(
    "given the base URL %j without an http(s) scheme, when the client is made, then ConfigurationError at once, nothing sent",
    (base) => {
      let sent = 0;
      const fetch = async () => {
        sent += 1;
        return new Response("{}");
      };
      expect(() => new Client(base, "t", { fetch })).toThrow(ConfigurationError);
      expect(sent).toBe(0);
    },
  );
});

describe("If-Match and rebases", () => {
  it("given another write got in first, when an edit names the old version, then PreconditionFailed names the head", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const read = await client.memory.patch({ summary: "one" });
    await client.memory.patch({ summary: "two" });
    const err = await client.memory.patch({ summary: "three" }, { ifMatch: read.version }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PreconditionFailed);
    expect((err as PreconditionFailed).currentVersion).toBe(read.version + 1);
  });

  it("given another write got in first, when an edit has a rebase, then the rebase gets the head and its edit is written on it", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const read = await client.memory.patch({ parts: { planner: { name: "planner", status: "active", goals: [] } } });
    await client.memory.patch({ summary: "written in between" });
    const addGoal = () => [{ op: "add", path: "/parts/planner/goals/-", value: { goal: "plan Sundays" } }] as never;
    const heads: number[] = [];
    const written = await client.memory.patch(addGoal(), {
      ifMatch: read.version,
      rebase: (head) => {
        heads.push(head.version);
        return addGoal();
      },
    });
    expect(heads).toEqual([read.version + 1]);
    expect(written.version).toBe(read.version + 2);
    expect(written.document).toMatchObject({ summary: "written in between", parts: { planner: { goals: [{ goal: "plan Sundays" }] } } });
  });

  it("given a rebase that gives up, when the edit is stale, then the PreconditionFailed is thrown", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const read = await client.memory.patch({ summary: "one" });
    await client.memory.patch({ summary: "two" });
    await expect(client.memory.patch({ summary: "x" }, { ifMatch: read.version, rebase: () => null })).rejects.toBeInstanceOf(
      PreconditionFailed,
    );
  });
});

describe("tokens", () => {
  it("given a token function, when a 401 comes back, then it is called again and the call goes through with the fresh token", async () => {
    const user = newUser();
    const tokens = [tokenFor(user, { secret: "a-stale-secret-of-at-least-32-bytes-long" }), tokenFor(user)];
    let calls = 0;
    const client = new Client(API, async () => tokens[Math.min(calls++, 1)] as string);
    const memory = await client.memory.get();
    expect(memory.user_id).toBe(user);
    expect(calls).toBe(2);
  });
});

describe("tokens that fail", () => {
  it("given a token function that throws, when a call is made, then its error comes out as it is, not retried", async () => {
    let calls = 0;
    const failure = new Error("the identity provider is down");
    const client = new Client(API, () => {
      calls += 1;
      throw failure;
    });
    await expect(client.memory.get()).rejects.toBe(failure);
    expect(calls).toBe(1);
  });
});

describe("retries through a proxy that misbehaves on cue", () => {
  let proxy: MisbehavingProxy;
  beforeAll(async () => {
    proxy = await new MisbehavingProxy(API).start();
  });
  afterAll(async () => {
    await proxy.stop();
  });

  it("given 503, a dropped connection and a 429 with Retry-After, when a write is sent, then it is retried with the same Idempotency-Key and written once", async () => {
    const notices: RetryNotice[] = [];
    const client = new Client(proxy.url, tokenFor(newUser()), { retries: quick, onRetry: (n) => notices.push(n) });
    const before = proxy.seen.length;
    proxy.cue("503", "drop", "429");
    const written = await client.memory.patch({ summary: "kept once" });
    const tries = proxy.seen.slice(before);
    expect(tries.map((t) => t.cue)).toEqual(["503", "drop", "429", "pass"]);
    const keys = new Set(tries.map((t) => t.headers["idempotency-key"]));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^client:[0-9a-f-]{36}$/);
    expect(notices.map((n) => n.error.name)).toEqual(["Unavailable", "TransportError", "RateLimited"]);
    expect(notices[2]?.waitSeconds).toBe(1); // the answer's Retry-After, not the backoff
    expect(notices.every((n) => n.path === "/me/memory")).toBe(true);
    expect(written.version).toBe(1);
  });

  it("given writes that are not edits (a key-value put, recorded activity, a touch), when each meets a 503, then each is retried with one Idempotency-Key of its own, a GET with none", async () => {
    const client = new Client(proxy.url, tokenFor(newUser()), { retries: quick });
    const before = proxy.seen.length;
    proxy.cue("503");
    await client.kv.put("prefs", "tea", "green");
    proxy.cue("503");
    await client.activity.record([{ source: "app", external_id: "k1", kind: "note", occurred_at: new Date().toISOString(), payload: {} }]);
    proxy.cue("503");
    await client.kv.touch("prefs", ["tea"]);
    await client.kv.get("prefs", "tea");
    const tries = proxy.seen.slice(before);
    expect(tries.map((t) => `${t.method} ${t.cue}`)).toEqual(["PUT 503", "PUT pass", "POST 503", "POST pass", "POST 503", "POST pass", "GET pass"]);
    const keys = tries.map((t) => t.headers["idempotency-key"]);
    for (const i of [0, 2, 4]) {
      expect(keys[i]).toMatch(/^client:[0-9a-f-]{36}$/);
      expect(keys[i + 1]).toBe(keys[i]);
    }
    expect(new Set([keys[0], keys[2], keys[4]]).size).toBe(3);
    expect(keys[6]).toBeUndefined();
  });

  it("given a write whose answer is lost after the server wrote it, when the client retries, then the server answers idempotent and there is one version", async () => {
    const client = new Client(proxy.url, tokenFor(newUser()), { retries: quick });
    proxy.cue("lost");
    const written = await client.memory.patch({ summary: "written, answer lost" });
    expect(written.status).toBe("idempotent");
    expect(written.version).toBe(1);
    const history = await client.memory.history();
    expect(history.items.map((i) => i.version)).toEqual([1]);
  });

  it("given the API is unavailable on every try, when a call is made, then Unavailable after the attempts", async () => {
    const client = new Client(proxy.url, tokenFor(newUser()), { retries: { ...quick, attempts: 3 } });
    const before = proxy.seen.length;
    proxy.cue("503", "503", "503");
    await expect(client.memory.get()).rejects.toBeInstanceOf(Unavailable);
    expect(proxy.seen.length - before).toBe(3);
  });

  it("given a proxy that never answers, when a call is made, then DeadlineExceeded (a TransportError) at the deadline", async () => {
    const client = new Client(proxy.url, tokenFor(newUser()), {
      retries: { attempts: 10, deadline: 1, timeout: 0.4, backoff: 0.01, maxBackoff: 0.01 },
    });
    proxy.cue("hang", "hang", "hang", "hang", "hang");
    const err = await client.memory.get().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeadlineExceeded);
    expect(err).toBeInstanceOf(TransportError);
    proxy.clear(); // the hangs the deadline left unused
  });

  it("given a 4xx, when a call is made through the proxy, then it is not retried", async () => {
    const client = new Client(proxy.url, tokenFor(newUser()), { retries: quick });
    const before = proxy.seen.length;
    await expect(client.memory.get({ version: 42 })).rejects.toBeInstanceOf(UnknownVersion);
    expect(proxy.seen.length - before).toBe(1);
  });
});
