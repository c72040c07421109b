import { readFileSync } from "node:fs";
import type { LanguageModelV3CallOptions, LanguageModelV3FunctionTool } from "@ai-sdk/provider";
import { generateText, stepCountIs } from "ai";
import { describe, expect, it } from "vitest";
import { Client } from "user-memory-client";
import { MemoryToolError, SCHEMAS, memorySystemPrompt, memoryTools } from "user-memory-client/ai";
import { scriptedModel, text, toolCall, toolResultsOf } from "./mock-model.js";
import { API, newUser, tokenFor } from "./support.js";

interface ServerTool {
  name: string;
  description: string;
  parameters: { properties: Record<string, Record<string, unknown>>; required: string[]; additionalProperties: boolean };
}
interface Definitions {
  schemas: Record<string, { sections: string[]; tools: Record<string, ServerTool> }>;
  mcp: Record<string, { description: string; input_schema: ServerTool["parameters"] }>;
}

const definitions = JSON.parse(readFileSync(process.env.USER_MEMORY_TOOL_DEFINITIONS ?? "", "utf8")) as Definitions;
const words = (s: unknown) => String(s).replace(/\s+/g, " ").trim();

/** The tools as the model is given them: one generateText call with the mock model, its options kept. */
async function toolsAsTheModelSeesThem(schema: string): Promise<Record<string, LanguageModelV3FunctionTool>> {
  let seen: LanguageModelV3CallOptions | undefined;
  const model = scriptedModel((_n, options) => {
    seen = options;
    return [text("ok")];
  });
  const client = new Client(API, tokenFor(newUser()));
  await generateText({ model, tools: memoryTools({ client, schema }), prompt: "hi" });
  const tools = (seen?.tools ?? []) as LanguageModelV3FunctionTool[];
  return Object.fromEntries(tools.map((t) => [t.name, t]));
}

/** The parts of a property's JSON Schema that say what is valid and what it means. */
function meaning(property: Record<string, unknown>) {
  const keep = ["type", "enum", "description", "minimum", "maximum", "minLength", "maxLength", "default"];
  return Object.fromEntries(keep.filter((k) => property[k] !== undefined).map((k) => [k, k === "description" ? words(property[k]) : property[k]]));
}

describe("the tools' schemas are the server's own definitions", () => {
  it.each(Object.keys(definitions.schemas))(
    "given the %s schema, when the tools are given to a model, then updateMemory and forgetMemory are the server's update_memory and forget_memory",
    async (schema) => {
      const server = definitions.schemas[schema]!;
      expect(SCHEMAS[schema]?.sections).toEqual(server.sections);
      const tools = await toolsAsTheModelSeesThem(schema);
      for (const [ours, theirs] of [
        ["updateMemory", "update_memory"],
        ["forgetMemory", "forget_memory"],
      ] as const) {
        const tool = tools[ours]!;
        const def = server.tools[theirs]!;
        const input = tool.inputSchema as ServerTool["parameters"];
        expect(tool.description).toBe(def.description);
        expect(Object.keys(input.properties).sort()).toEqual(Object.keys(def.parameters.properties).sort());
        for (const [name, property] of Object.entries(def.parameters.properties)) {
          expect(meaning(input.properties[name]!), `${ours}.${name}`).toEqual(meaning(property));
        }
        expect([...input.required].sort()).toEqual([...def.parameters.required].sort());
        expect(input.additionalProperties).toBe(false);
      }
    },
  );

  it("given the MCP server's read tools, when readMemory and searchMemory are given to a model, then their descriptions and arguments are the same", async () => {
    const tools = await toolsAsTheModelSeesThem("user_state");
    for (const [ours, theirs] of [
      ["readMemory", "read_memory"],
      ["searchMemory", "search_memory"],
    ] as const) {
      const tool = tools[ours]!;
      const def = definitions.mcp[theirs]!;
      const input = tool.inputSchema as ServerTool["parameters"];
      expect(words(tool.description)).toBe(words(def.description));
      expect(Object.keys(input.properties).sort()).toEqual(Object.keys(def.input_schema.properties).sort());
      for (const [name, property] of Object.entries(def.input_schema.properties)) {
        expect(meaning(input.properties[name]!), `${ours}.${name}`).toEqual(meaning(property));
      }
      expect(input.additionalProperties).toBe(false);
    }
  });

  it("given a schema the package does not know, when tools are asked for without its sections, then MemoryToolError", () => {
    const client = new Client(API, "t");
    expect(() => memoryTools({ client, schema: "mine" })).toThrow(MemoryToolError);
    expect(Object.keys(memoryTools({ client, schema: "mine", sections: ["notes"] }))).toHaveLength(4);
  });
});

describe("the tools, driven by the AI SDK's mock model against serve", () => {
  it("given a model that updates, appends, searches, forgets and reads, when generateText runs, then the memory follows each call", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const script = [
      toolCall("updateMemory", { section: "summary", mode: "merge", value_json: JSON.stringify("Learns the cello") }),
      toolCall("updateMemory", {
        section: "triggers_and_goals",
        mode: "append",
        value_json: JSON.stringify([
          { trigger: "Sunday evening", desired_outcome: "practise scales", related_parts: [] },
          { trigger: "Monday morning", desired_outcome: "plan the week", related_parts: [] },
        ]),
      }),
      toolCall("searchMemory", { query: "scales" }),
      toolCall("forgetMemory", { target: "/triggers_and_goals/0" }),
      toolCall("readMemory", { budget_tokens: 300 }),
    ];
    const model = scriptedModel((n) => (n < script.length ? [script[n]!] : [text("done")]));
    const result = await generateText({ model, tools: memoryTools({ client }), stopWhen: stepCountIs(10), prompt: "remember" });
    expect(result.text).toBe("done");
    const outputs = result.steps.flatMap((s) => s.toolResults.map((r) => r.output as Record<string, unknown>));
    expect(outputs.slice(0, 2)).toEqual([
      { version: 1, status: "written" },
      { version: 2, status: "written" },
    ]);
    const search = outputs[2] as { items: { path: string; text: string }[] };
    expect(search.items.some((i) => i.path.startsWith("/triggers_and_goals/0") && i.text.includes("scales"))).toBe(true);
    expect(outputs[3]).toEqual({ version: 3, status: "written" });
    expect(outputs[4]).toMatchObject({ version: 3, memory: expect.stringContaining("plan the week") });
    const head = await client.memory.get();
    expect(head.document.summary).toBe("Learns the cello");
    expect(head.document.triggers_and_goals).toEqual([
      { trigger: "Monday morning", desired_outcome: "plan the week", related_parts: [] },
    ]);
  });

  it("given an append to a text section and a forget of nothing, when the model calls them, then it gets tool errors and nothing is written", async () => {
    const client = new Client(API, tokenFor(newUser()));
    await client.memory.patch({ summary: "Learns the cello" });
    const script = [
      toolCall("updateMemory", { section: "summary", mode: "append", value_json: '"more"' }),
      toolCall("forgetMemory", { target: "/triggers_and_goals/7" }),
      toolCall("updateMemory", { section: "summary", mode: "merge", value_json: "{not json" }),
    ];
    let errors: unknown[] = [];
    const model = scriptedModel((n, options) => {
      errors = toolResultsOf(options).map((r) => r.output);
      return n < script.length ? [script[n]!] : [text("sorry")];
    });
    await generateText({ model, tools: memoryTools({ client }), stopWhen: stepCountIs(10), prompt: "x" });
    expect(errors).toHaveLength(3);
    expect(errors.map((e) => (e as { type: string }).type)).toEqual(["error-text", "error-text", "error-text"]);
    expect(String((errors[0] as { value: string }).value)).toMatch(/not a list or an object; use merge or replace/);
    expect(String((errors[1] as { value: string }).value)).toMatch(/409/);
    expect(String((errors[2] as { value: string }).value)).toMatch(/value_json is not JSON/);
    expect((await client.memory.get()).version).toBe(1);
  });

  it("given the same tool call delivered twice, when it runs twice, then it is written once (its idempotency key is the call's id)", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const tools = memoryTools({ client });
    const args = { section: "summary", mode: "merge" as const, value_json: '"once"' };
    const run = () => tools.updateMemory.execute!(args, { toolCallId: "call-twice", messages: [] });
    expect(await run()).toEqual({ version: 1, status: "written" });
    expect(await run()).toEqual({ version: 1, status: "idempotent" });
  });

  it("given another write lands between an append's read and its write, when the append is rebased, then both are kept", async () => {
    const user = newUser();
    const client = new Client(API, tokenFor(user));
    await client.memory.patch({ triggers_and_goals: [{ trigger: "a", desired_outcome: "b", related_parts: [] }] });
    let interfered = false;
    // The tool's client, whose first PATCH finds another write in first.
    const racing = new Client(API, tokenFor(user), {
      fetch: async (input, init) => {
        if (init.method === "PATCH" && !interfered) {
          interfered = true;
          await client.memory.patch({ summary: "written in between" });
        }
        return fetch(input, init);
      },
    });
    const tools = memoryTools({ client: racing });
    const value_json = JSON.stringify({ trigger: "c", desired_outcome: "d", related_parts: [] });
    const out = await tools.updateMemory.execute!({ section: "triggers_and_goals", mode: "append", value_json }, { toolCallId: "race", messages: [] });
    expect(out).toEqual({ version: 3, status: "written" });
    const head = await client.memory.get();
    expect(head.document.summary).toBe("written in between");
    expect((head.document.triggers_and_goals as unknown[]).length).toBe(2);
  });
});

describe("the memory in a system prompt", () => {
  it("given a memory, when it is rendered with a small and a large budget, then both name the version and the small one is cut", async () => {
    const client = new Client(API, tokenFor(newUser()));
    const notes = Array.from({ length: 40 }, (_, i) => `note ${i}: practises scale number ${i} slowly`).join("; ");
    await client.memory.patch({ summary: notes });
    const large = await memorySystemPrompt(client, { budgetTokens: 2000 });
    const small = await memorySystemPrompt(client, { budgetTokens: 20 });
    expect(large).toContain("(version 1)");
    expect(large).toContain("note 39");
    expect(small).toContain("(version 1)");
    expect(small).not.toContain("note 39");
    expect(small.length).toBeLessThan(large.length);
  });

  it("given a new user, when the prompt is rendered, then it says there is nothing yet", async () => {
    const client = new Client(API, tokenFor(newUser()));
    expect(await memorySystemPrompt(client, { preamble: "P" })).toBe("P\n\nWhat you remember about this user (version 0):\n(nothing yet)");
  });
});

