/** Properties on generated input: keys and values round-trip through the API, and an error answer
 * of any shape becomes a typed error. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ApiError, Client, InvalidArgument, NotFound, ServerError, errorFor, retryAfterSeconds } from "user-memory-client";
import { API, newUser, tokenFor } from "./support.js";

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const keys = fc
  .string({ unit: "grapheme", minLength: 1, maxLength: 20 })
  .filter((k) => !CONTROL.test(k) && k !== "." && k !== "..");
const values = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.string({ unit: "grapheme", maxLength: 10 }).filter((s) => !s.includes("\u0000")),
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 5 }).filter((s) => !s.includes("\u0000")), tie("value"), { maxKeys: 3 }),
  ),
})).value;

describe("keys and values", () => {
  it("given any key and JSON value, when put and read back, then the entry is the same key and value", async () => {
    const client = new Client(API, tokenFor(newUser()));
    await fc.assert(
      fc.asyncProperty(keys, values, async (key, value) => {
        await client.kv.put("props", key, value);
        const entry = await client.kv.get("props", key);
        expect(entry.key).toBe(key);
        expect(entry.value).toEqual(value);
      }),
      { numRuns: 30 },
    );
  });

  it.each([".", ".."])("given the key %j, which a URL path cannot hold, when it is used, then InvalidArgument and nothing is sent", async (key) => {
    let sent = 0;
    const client = new Client(API, "t", {
      fetch: async () => {
        sent += 1;
        return new Response("{}");
      },
    });
    await expect(client.kv.get("props", key)).rejects.toBeInstanceOf(InvalidArgument);
    await expect(client.kv.put("props", key, 1)).rejects.toBeInstanceOf(InvalidArgument);
    expect(sent).toBe(0);
  });
});

describe("error answers of any shape", () => {
  it("given any error status and body, when it is turned into an error, then it is an ApiError of that status, by status when the body is no problem", () => {
    fc.assert(
      fc.property(fc.integer({ min: 400, max: 599 }), fc.string(), fc.option(fc.json()), (status, reason, body) => {
        const err = errorFor(status, reason, new Headers(), body ?? "");
        expect(err).toBeInstanceOf(ApiError);
        expect(err.status).toBe(status);
        if (status === 404) expect(err).toBeInstanceOf(NotFound);
        if (status >= 500) expect(err).toBeInstanceOf(ServerError);
        expect(err.detail.length).toBeGreaterThan(0);
      }),
    );
  });

  it("given Retry-After as whole seconds or anything else, when it is read, then the seconds, or null, never a negative wait", () => {
    fc.assert(
      fc.property(fc.nat(), (n) => {
        expect(retryAfterSeconds(new Headers({ "Retry-After": String(n) }))).toBe(n);
      }),
    );
    fc.assert(
      fc.property(fc.string().filter((s) => /^[\x20-\x7e]*$/.test(s)), (s) => {
        const seconds = retryAfterSeconds(new Headers({ "Retry-After": s }));
        expect(seconds === null || seconds >= 0).toBe(true);
      }),
    );
  });
});
