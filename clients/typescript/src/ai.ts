/**
 * Memory tools for the Vercel AI SDK: `memoryTools({ client })` gives a model the same four tools
 * the server's MCP server offers (read_memory, search_memory, update_memory, forget_memory), with
 * the argument schemas and descriptions of the server's own definitions
 * (`domain/memory/agent.py`'s `tool_definitions` for the edits, the MCP server's for the reads;
 * a test compares them), run over the HTTP API as the client's user.
 *
 * `memorySystemPrompt(client)` renders the memory into a system prompt cut to a token budget
 * (`GET /me/memory/prompt`).
 *
 * `ai` and `zod` are peer dependencies: this module is the package's `user-memory-client/ai`.
 */
import { tool } from "ai";
import { z } from "zod";
import type { Client, JsonValue, Memory, PatchOperation, Written } from "./client.js";

export const UPDATE_TOOL = "update_memory";
export const FORGET_TOOL = "forget_memory";
export const MODES = ["merge", "replace", "append"] as const;
export const DEFAULT_RENDER_BUDGET = 800;
export const MAX_RENDER_BUDGET = 32_000;

/** The sections of the server's document schemas and their hints for the model (SECTION_HINTS). */
export const SCHEMAS: Record<string, { sections: readonly string[]; hints: Record<string, string> }> = {
  user_state: {
    sections: ["summary", "parts", "triggers_and_goals", "safety_notes"],
    hints: {
      summary: "text, a short summary of the user",
      parts:
        'object keyed by part id, each {"name": text, "status": text, "recency_score": 0..1, ' +
        '"influence_score": 0..1, "goals": [{"goal": text}]}',
      triggers_and_goals: 'list of {"trigger": text, "desired_outcome": text, "related_parts": [part id]}',
      safety_notes: "text, what the agent must be careful about",
    },
  },
  tutor: {
    sections: ["personal_info", "areas_to_improve", "knowledge_strengths"],
    hints: {
      personal_info:
        'object {"name", "preferred_name", "language", "timezone", "age_group": text, ' +
        '"learning_goals": [text], "other": {text: text}}',
      areas_to_improve:
        'list of {"topic": text, "evidence": [text], "first_noted": "YYYY-MM-DD" or null, ' +
        '"last_noted": "YYYY-MM-DD" or null, "severity": 1..5}',
      knowledge_strengths:
        'list of {"topic": text, "evidence": [text], "level": "beginner" | "intermediate" | "advanced"}',
    },
  },
  companion: {
    sections: ["basic_info", "advanced_info", "goals", "todos", "events", "current_state", "feedback"],
    hints: {},
  },
};

export interface MemoryToolsOptions {
  client: Client;
  /** The deployment's DOCUMENT_SCHEMA (default user_state). */
  schema?: string;
  /** For a schema of your own: its sections (and hints), instead of `schema`'s. */
  sections?: readonly string[];
  hints?: Record<string, string>;
}

function updateDescription(sections: readonly string[], hints: Record<string, string>): string {
  const shapes = sections.map((s) => (s in hints ? `- ${s}: ${hints[s]}` : `- ${s}`)).join("\n");
  return (
    "Update one section of what you remember about this user, when they tell you something worth " +
    "keeping or correct something you remember. Sections:\n" +
    shapes
  );
}

/** Thrown to the model (the AI SDK turns it into a tool error): an edit that cannot be made. */
export class MemoryToolError extends Error {
  override name = "MemoryToolError";
}

function pointer(...tokens: string[]): string {
  return tokens.map((t) => "/" + t.replace(/~/g, "~0").replace(/\//g, "~1")).join("");
}

function isObject(value: unknown): value is { [key: string]: JsonValue } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseValue(text: string): JsonValue {
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new MemoryToolError(`${UPDATE_TOOL}: value_json is not JSON (${(err as Error).message})`);
  }
}

/** The JSON Patch that appends `value` to `section` of `head`, as the server's apply_update does. */
function appendPatch(head: Memory, section: string, value: JsonValue): PatchOperation[] {
  const current = head.document[section];
  const items = (v: JsonValue) => (Array.isArray(v) ? v : [v]);
  if (Array.isArray(current)) {
    return items(value).map((item) => ({ op: "add", path: pointer(section, "-"), value: item }) as PatchOperation);
  }
  if (isObject(current)) {
    if (!isObject(value)) {
      throw new MemoryToolError(`${UPDATE_TOOL}: append to the object section ${section} takes an object of lists`);
    }
    const ops: PatchOperation[] = [];
    for (const [member, more] of Object.entries(value)) {
      const existing = current[member];
      if (existing === undefined) {
        ops.push({ op: "add", path: pointer(section, member), value: items(more) } as PatchOperation);
      } else if (Array.isArray(existing)) {
        for (const item of items(more)) ops.push({ op: "add", path: pointer(section, member, "-"), value: item } as PatchOperation);
      } else {
        throw new MemoryToolError(`${UPDATE_TOOL}: ${section}.${member} is not a list; use merge or replace`);
      }
    }
    return ops;
  }
  throw new MemoryToolError(`${UPDATE_TOOL}: the section ${section} is not a list or an object; use merge or replace`);
}

function outcome(written: Written): { version: number; status: string } {
  return { version: written.version, status: written.status };
}

/**
 * The AI SDK tools readMemory, searchMemory, updateMemory and forgetMemory on the client's user.
 * Each write carries the idempotency key `ai:tool:<toolCallId>`, so a tool call run twice writes once.
 */
export function memoryTools(options: MemoryToolsOptions) {
  const { client } = options;
  const known = SCHEMAS[options.schema ?? "user_state"];
  const sections = options.sections ?? known?.sections;
  if (sections === undefined || sections.length === 0) {
    throw new MemoryToolError(`unknown schema ${JSON.stringify(options.schema)}: pass its sections`);
  }
  const hints = options.sections ? (options.hints ?? {}) : (known?.hints ?? {});
  const sectionEnum = z.enum(sections as [string, ...string[]]);
  const key = (toolCallId: string) => `ai:tool:${toolCallId}`;

  return {
    readMemory: tool({
      description:
        "What you remember about this user, as labeled lines cut to a token budget, and its version.",
      inputSchema: z.object({
        budget_tokens: z
          .number()
          .int()
          .min(1)
          .max(MAX_RENDER_BUDGET)
          .default(DEFAULT_RENDER_BUDGET)
          .describe("the most tokens the memory may take (about 4 characters each)"),
      }).strict(),
      execute: async ({ budget_tokens }) => {
        const prompt = await client.memory.prompt({ budgetTokens: budget_tokens });
        return { version: prompt.version, memory: prompt.text };
      },
    }),

    searchMemory: tool({
      description:
        "Find the items of the memory (facts, goals, to-dos, events, ...) that best match a query, each with its " +
        "JSON Pointer (usable with forget_memory) and the version that last changed it.",
      inputSchema: z.object({
        query: z.string().min(1).max(500).describe("what to look for, in plain words"),
        k: z.number().int().min(1).max(50).default(5).describe("how many items"),
      }).strict(),
      execute: async ({ query, k }) => {
        const found = await client.memory.search(query, { k });
        return {
          mode: found.mode,
          items: found.items.map((h) => ({ path: h.path, version: h.version, text: h.text, score: h.score })),
        };
      },
    }),

    updateMemory: tool({
      description: updateDescription(sections, hints),
      inputSchema: z.object({
        section: sectionEnum.describe("the section to update"),
        mode: z
          .enum(MODES)
          .describe(
            "merge: an object merged into the section (nested objects merge, null deletes a key, " +
              "lists are replaced, unnamed keys are kept); replace: the new section whole; " +
              "append: for a list section an item or a list of items to add at the end, for an " +
              "object section an object of lists to extend",
          ),
        value_json: z.string().describe('the value as JSON text, for example {"timezone": "Europe/Paris"}'),
      }).strict(),
      execute: async ({ section, mode, value_json }, { toolCallId }) => {
        const value = parseValue(value_json);
        if (mode === "merge" && value === null) {
          return outcome(await client.memory.prune(section, { idempotencyKey: key(toolCallId) }));
        }
        if (mode === "merge") {
          return outcome(await client.memory.patch({ [section]: value }, { idempotencyKey: key(toolCallId) }));
        }
        if (mode === "replace") {
          const ops = [{ op: "add", path: pointer(section), value }] as PatchOperation[];
          return outcome(await client.memory.patch(ops, { idempotencyKey: key(toolCallId) }));
        }
        // append reads the head (a missing section first becomes its default, as on the server) and
        // writes on that version only; another write in between is rebased, never lost.
        let head = await client.memory.get();
        if (head.document[section] === undefined) {
          await client.memory.prune(section, { ifMatch: head.version, idempotencyKey: `${key(toolCallId)}:default` });
          head = await client.memory.get();
        }
        const written = await client.memory.patch(appendPatch(head, section, value), {
          ifMatch: head.version,
          idempotencyKey: key(toolCallId),
          rebase: (next) => appendPatch(next, section, value),
        });
        return outcome(written);
      },
    }),

    forgetMemory: tool({
      description:
        "Forget something you remember about this user, when they ask you to or it is no longer true: " +
        "a whole section (it becomes empty) or one member or list item inside it.",
      inputSchema: z.object({
        target: z
          .string()
          .describe(
            `a section name (${sections.join(", ")}) or a JSON Pointer into one: ` +
              '"/<section>/<index>" for an item of a list section, "/<section>/<key>" for a member ' +
              'of an object section (in a key, ~1 stands for "/" and ~0 for "~")',
          ),
      }).strict(),
      execute: async ({ target }, { toolCallId }) => {
        const tokens = target.startsWith("/") ? target.slice(1).split("/") : [target];
        const section = (tokens[0] ?? "").replace(/~1/g, "/").replace(/~0/g, "~");
        if (!sections.includes(section)) {
          throw new MemoryToolError(`${FORGET_TOOL}: unknown section ${JSON.stringify(section)}; the sections are ${sections.join(", ")}`);
        }
        if (tokens.length === 1) {
          return outcome(await client.memory.prune(section, { idempotencyKey: key(toolCallId) }));
        }
        const ops = [{ op: "remove", path: target }] as PatchOperation[];
        return outcome(await client.memory.patch(ops, { idempotencyKey: key(toolCallId) }));
      },
    }),
  };
}

/**
 * The system prompt with the user's memory in it, cut to `budgetTokens` (about 4 characters each):
 * `preamble`, then the memory as labeled lines (GET /me/memory/prompt).
 */
export async function memorySystemPrompt(
  client: Client,
  options: { budgetTokens?: number; preamble?: string } = {},
): Promise<string> {
  const prompt = await client.memory.prompt({ budgetTokens: options.budgetTokens ?? DEFAULT_RENDER_BUDGET });
  const preamble =
    options.preamble ??
    "You remember this user across conversations. Use the memory tools to keep it up to date.";
  const memory = prompt.text.trim() ? prompt.text : "(nothing yet)";
  return `${preamble}\n\nWhat you remember about this user (version ${prompt.version}):\n${memory}`;
}
