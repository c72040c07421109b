/**
 * A chat route that remembers its users across sessions: a plain Node HTTP handler around the
 * AI SDK's generateText, with the user's memory in the system prompt and the memory tools.
 *
 *   POST /chat  Authorization: Bearer <the user's token>  {"messages": [{"role": "user", "content": "..."}]}
 *   200 {"text": "..."}
 *
 * The user's own bearer token is passed on to the memory API, so the API's row-level security keeps
 * users apart: the route never names a user itself. Run it with any AI SDK model:
 *
 *   import { openai } from "@ai-sdk/openai";
 *   http.createServer(chatHandler({ api: "http://127.0.0.1:8080", model: openai("gpt-4.1-mini") })).listen(3000);
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { generateText, stepCountIs, type LanguageModel, type ModelMessage } from "ai";
import { ApiError, Client } from "user-memory-client";
import { memorySystemPrompt, memoryTools } from "user-memory-client/ai";

export interface ChatOptions {
  /** The memory API's base URL (`user-memory serve` prints it). */
  api: string;
  model: LanguageModel;
  /** The deployment's DOCUMENT_SCHEMA (default user_state). */
  schema?: string;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function answer(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}

export function chatHandler(options: ChatOptions) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (req.method !== "POST" || req.url !== "/chat") return answer(res, 404, { error: "POST /chat" });
    if (!token) return answer(res, 401, { error: "send Authorization: Bearer <token>" });
    let messages: ModelMessage[];
    try {
      messages = ((await readJson(req)) as { messages: ModelMessage[] }).messages;
    } catch {
      return answer(res, 400, { error: "the body must be JSON: {\"messages\": [...]}" });
    }
    try {
      // The ten lines a chat needs to remember its user:
      const client = new Client(options.api, token);
      const { text } = await generateText({
        model: options.model,
        system: await memorySystemPrompt(client, { budgetTokens: 800 }),
        tools: memoryTools({ client, schema: options.schema }),
        stopWhen: stepCountIs(5),
        messages,
      });
      answer(res, 200, { text });
    } catch (err) {
      if (err instanceof ApiError) return answer(res, err.status, { error: err.message });
      // Never the message: a model's or a provider's error may quote the conversation.
      console.error(`chat: ${(err as Error).name ?? "Error"}`);
      answer(res, 500, { error: "the chat failed" });
    }
  };
}
