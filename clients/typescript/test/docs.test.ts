/**
 * docs/client.md's TypeScript examples, as written there, run against serve: each ```ts block of
 * the TypeScript section becomes a module of its own, given the names the guide says the reader
 * has (API, getToken, model, messages, and the client of the blocks before) unless it makes them.
 */
import { fileURLToPath } from "node:url";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { Client } from "user-memory-client";
import { scriptedModel, systemOf, text, toolCall } from "./mock-model.js";
import { API, newUser, tokenFor } from "./support.js";

// Not import.meta.dirname: Node 18 has no such thing.
const HERE = fileURLToPath(new URL(".", import.meta.url));

const GUIDE = resolve(HERE, "../../../docs/client.md");
const HEADING = "## TypeScript and the Vercel AI SDK";
const OUT = resolve(HERE, ".doc");

function blocks(): string[] {
  const page = readFileSync(GUIDE, "utf8");
  const section = page.slice(page.indexOf(HEADING));
  return [...section.matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((m) => m[1]!);
}

type Given = { API: string; getToken: () => string; model?: unknown; messages?: unknown; client?: Client; console: Pick<Console, "log"> };
const given = globalThis as unknown as { __doc: Given & { text?: string } };

let runs = 0;
/** Runs one block as a module; resolves when its top-level awaits are done. */
async function run(block: string, names: Given): Promise<void> {
  given.__doc = names;
  const declares = (name: string) =>
    new RegExp(`\\b(const|let)\\s+${name}\\b|^import \\{[^}]*\\b${name}\\b[^}]*\\}`, "m").test(block);
  const prelude = [
    declares("Client") ? "" : 'import { Client } from "user-memory-client";',
    ...Object.keys(names)
      .filter((name) => !declares(name))
      .map((name) => `const ${name} = (globalThis as any).__doc.${name};`),
  ].join("\n");
  const keep = /const \{ text \}/.test(block) ? "\n(globalThis as any).__doc.text = text;\n" : "";
  mkdirSync(OUT, { recursive: true });
  const file = join(OUT, `block-${process.pid}-${++runs}.ts`);
  writeFileSync(file, `${prelude}\n${block}${keep}`);
  await import(file);
}

const examples = blocks();

describe("docs/client.md's TypeScript examples", () => {
  it("given the guide, when its TypeScript blocks are read, then there are the four it promises and the chat is ten lines", () => {
    expect(examples).toHaveLength(4);
    expect(examples[0]!.trim().split("\n").filter((l) => l.trim()).length).toBeLessThanOrEqual(10);
  });

  it("given the ten-line chat and a model that keeps a name, when a user gives their name and asks in a new session, then the chat knows it", async () => {
    const token = tokenFor(newUser());
    const model = scriptedModel((n, options) => {
      const said = JSON.stringify(options.prompt.filter((m) => m.role === "user"));
      const name = /call me (\w+)/.exec(said)?.[1];
      if (name && n === 0) {
        return [toolCall("updateMemory", { section: "summary", mode: "merge", value_json: JSON.stringify(`Called ${name}`) })];
      }
      if (name) return [text("Noted.")];
      return [text(`You are ${/Called (\w+)/.exec(systemOf(options))?.[1] ?? "new here"}.`)];
    });
    const session = async (content: string) => {
      await run(examples[0]!, { API, getToken: () => token, model, messages: [{ role: "user", content }], console });
      return given.__doc.text;
    };
    expect(await session("Hello, call me Annie")).toBe("Noted.");
    expect(await session("Who am I?")).toBe("You are Annie.");
  });

  it("given the client example, when it runs, then it edits on the version it read and prints the hit and the history", async () => {
    const token = tokenFor(newUser());
    const printed: unknown[][] = [];
    await run(examples[1]!, { API, getToken: () => token, console: { log: (...a: unknown[]) => printed.push(a) } });
    expect(printed).toEqual([["/summary", "summary: Learns algebra in the evenings"], [1]]);
  });

  it("given the If-Match example, when it runs, then the stale edit fails and the rebased one is written on the head", async () => {
    const token = tokenFor(newUser());
    const client = new Client(API, token);
    await run(examples[2]!, { API, getToken: () => token, client, console });
    const head = await client.memory.get();
    expect(head.version).toBe(2);
    expect(head.document).toMatchObject({ summary: "another writer got in first", safety_notes: "checked at version 1" });
  });

  it("given the retries example, when it runs, then its client calls through with the options given", async () => {
    const token = tokenFor(newUser());
    await run(`${examples[3]!}\n(globalThis as any).__doc.text = (await patient.memory.get()).user_id;`, {
      API,
      getToken: () => token,
      console,
    });
    expect(given.__doc.text).toMatch(/^[0-9a-f-]{36}$/);
  });
});
