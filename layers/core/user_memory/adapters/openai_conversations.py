"""Conversation memories from an OpenAI-compatible endpoint, with strict structured output.

The model reads the conversation's memory so far (none for a new one) and its new messages, and
answers with the whole memory (`conversation_memory`, the `ConversationMemory` schema in strict
mode: every field required, no other keys). The same client and the same retry rules as the
daily summarizer (`openai_summarizer`): our own retries of 429, 5xx, timeouts and connection
errors, every try and every wait inside the time the caller gives.

The prompt: fixed instructions first (the same for every conversation, so an endpoint that
caches prompt prefixes reuses them), then the memory so far as compact JSON between `<memory>`
lines and the messages between `<messages>` lines, one per message (`message_line`), then the
feedback of a retry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from user_memory.adapters.openai_calls import (
    ChatCaller,
    answer_json,
    chat_client,
    paid_answer,
    strict_schema,
    usage_tokens,
)
from user_memory.domain.conversations.model import MAX_MEMORY_ITEMS, ConversationMemory, ConversationMessage
from user_memory.domain.conversations.ports import ConversationSummary
from user_memory.domain.conversations.summarizer import message_line

if TYPE_CHECKING:
    from user_memory.config import WorkerSettings

RESPONSE_NAME = "conversation_memory"

SYSTEM_PROMPT = f"""You keep the memory of one conversation between a user and an AI assistant.
You are given the memory so far (empty for a new conversation) and the conversation's new messages.
Answer with the whole updated memory as JSON matching the schema:
- discussed: what the conversation was about, in at most five sentences (keep what the memory said, add what is new).
- learned_about_user: facts, preferences and circumstances the user revealed about themselves.
- decisions: what the user decided or agreed to.
- open_loops: questions left unanswered, promises and follow-ups not yet done; drop the ones the new messages close.
- tone: the user's tone and mood, in a few words.
One short sentence per list item, at most {MAX_MEMORY_ITEMS} items per list, newest last. Write only what the
messages support: no guesses, nothing about the assistant itself. Keep sensitive details (health,
relationships) only when the user shared them as relevant to how they want to be helped."""


@cache
def memory_schema() -> dict[str, Any]:
    return strict_schema(ConversationMemory.model_json_schema())


def response_format() -> dict[str, Any]:
    """The chat completion's response_format: strict structured output `conversation_memory`."""
    return {"type": "json_schema", "json_schema": {"name": RESPONSE_NAME, "strict": True, "schema": memory_schema()}}


class OpenAIConversationSummarizer(ChatCaller):
    """ConversationSummarizer over an OpenAI-compatible chat completions endpoint."""

    @classmethod
    def from_settings(cls, settings: WorkerSettings, *, api_key: str | None = None) -> OpenAIConversationSummarizer:
        return cls(chat_client(settings, api_key=api_key), **cls.settings_of(settings))

    def messages(
        self,
        previous: ConversationMemory | None,
        messages: Sequence[ConversationMessage],
        feedback: str | None = None,
    ) -> list[dict[str, str]]:
        """The chat messages of one call: the fixed instructions, then the memory and the messages."""
        memory = json.dumps(previous.model_dump() if previous else {}, ensure_ascii=False, separators=(",", ":"))
        lines = "\n".join(message_line(m) for m in messages)
        user = (
            f"<memory>\n{memory}\n</memory>\n"
            f"<messages>\n{lines}\n</messages>\n"
            f"{len(messages)} new messages. Return the complete updated memory."
        )
        if feedback:
            user += f"\nYour previous answer could not be used: {feedback}"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def summarize_conversation(
        self,
        previous: ConversationMemory | None,
        messages: Sequence[ConversationMessage],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> ConversationSummary:
        response = self.complete(self.messages(previous, messages, feedback), response_format(), timeout)
        prompt_tokens, completion_tokens, _cached = usage_tokens(response)
        with paid_answer(prompt_tokens, completion_tokens):  # asked again by the caller
            memory = ConversationMemory.model_validate(answer_json(response)).normalized()
        return ConversationSummary(
            memory=memory, model=self.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
