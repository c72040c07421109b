import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { LanguageModelV3CallOptions } from "@ai-sdk/provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "user-memory-client";
import { chatHandler } from "../examples/chat.js";
import { scriptedModel, systemOf, text, toolCall } from "./mock-model.js";
import { API, newUser, tokenFor } from "./support.js";

/**
 * The mock model plays a chat model: told a name, it calls updateMemory and confirms; asked who
 * the user is, it answers from the system prompt (the memory) or says it does not know.
 */
const model = scriptedModel((n, options: LanguageModelV3CallOptions) => {
  const said = JSON.stringify(options.prompt.filter((m) => m.role === "user"));
  const name = /call me (\w+)/.exec(said)?.[1];
  if (name && n === 0) {
    return [
      toolCall("updateMemory", {
        section: "summary",
        mode: "merge",
        value_json: JSON.stringify(`Prefers to be called ${name}; learns the cello`),
      }),
    ];
  }
  if (name) return [text(`Noted, ${name}.`)];
  const remembered = /Prefers to be called (\w+)/.exec(systemOf(options))?.[1];
  return [text(remembered ? `You are ${remembered}, and you learn the cello.` : "I don't know you yet.")];
});

describe("the example chat route remembers a user across sessions", () => {
  let server: Server;
  let url = "";
  beforeAll(async () => {
    server = createServer(chatHandler({ api: API, model }));
    await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/chat`;
  });
  afterAll(async () => {
    await new Promise((done) => server.close(done));
  });

  const chat = async (token: string, content: string) => {
    const res = await fetch(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content }] }),
    });
    return { status: res.status, body: (await res.json()) as { text?: string; error?: string } };
  };

  it("given a user who said their name in one session, when they ask in a new session, then the chat knows them and another user is not told", async () => {
    const ann = tokenFor(newUser());
    expect(await chat(ann, "Hi, call me Annie please")).toEqual({ status: 200, body: { text: "Noted, Annie." } });
    const memory = await new Client(API, ann).memory.get();
    expect(memory.document.summary).toBe("Prefers to be called Annie; learns the cello");

    // A new session: no messages from before, only the memory.
    expect(await chat(ann, "Who am I?")).toEqual({ status: 200, body: { text: "You are Annie, and you learn the cello." } });
    expect(await chat(tokenFor(newUser()), "Who am I?")).toEqual({ status: 200, body: { text: "I don't know you yet." } });
  });

  it("given a request with a bad token, when it is sent, then the route answers 401 from the memory API", async () => {
    const bad = tokenFor(newUser(), { secret: "not-the-secret-of-at-least-32-bytes-long" });
    const answer = await chat(bad, "hello");
    expect(answer.status).toBe(401);
  });
});
