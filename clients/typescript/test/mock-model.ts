/** The AI SDK's own mock language model, scripted: each step sees the prompt and answers. */
import type { LanguageModelV3CallOptions, LanguageModelV3Content, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

let calls = 0;

export function toolCall(toolName: string, input: unknown): LanguageModelV3Content {
  calls += 1;
  return { type: "tool-call", toolCallId: `call-${calls}-${Date.now()}`, toolName, input: JSON.stringify(input) };
}

export function text(value: string): LanguageModelV3Content {
  return { type: "text", text: value };
}

export function step(content: LanguageModelV3Content[]): LanguageModelV3GenerateResult {
  const calling = content.some((c) => c.type === "tool-call");
  return {
    content,
    finishReason: { unified: calling ? "tool-calls" : "stop", raw: undefined },
    usage,
    warnings: [],
  };
}

/** The system prompt the model was given. */
export function systemOf(options: LanguageModelV3CallOptions): string {
  return options.prompt
    .filter((m) => m.role === "system")
    .map((m) => m.content)
    .join("\n");
}

/** The tool results (and errors) the model has been given so far, in order. */
export function toolResultsOf(options: LanguageModelV3CallOptions): { toolName: string; output: unknown }[] {
  return options.prompt.flatMap((m) =>
    m.role === "tool" ? m.content.flatMap((p) => (p.type === "tool-result" ? [{ toolName: p.toolName, output: p.output }] : [])) : [],
  );
}

/** A model whose step n (0-based, counted by the tool results it has seen) is `script(n, options)`. */
export function scriptedModel(script: (n: number, options: LanguageModelV3CallOptions) => LanguageModelV3Content[]) {
  return new MockLanguageModelV3({
    doGenerate: async (options) => step(script(toolResultsOf(options).length, options)),
  });
}
