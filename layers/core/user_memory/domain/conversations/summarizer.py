"""A conversation's messages as prompt lines, and the rule-based conversation summarizer (no LLM
configured)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC

from user_memory.domain.conversations.model import (
    MAX_MESSAGE_LINE_CHARS,
    ConversationMemory,
    ConversationMessage,
    cut_text,
)
from user_memory.domain.conversations.ports import ConversationSummary

# -- the prompt's lines --------------------------------------------------------------------------------------


def message_line(m: ConversationMessage) -> str:
    """One message as the prompt shows it: `[time] role: text`, cut with a marker when long."""
    text = " ".join(m.text.split())
    line = f"[{m.occurred_at.astimezone(UTC).isoformat(timespec='seconds')}] {m.role}: {text}"
    if len(line) > MAX_MESSAGE_LINE_CHARS:
        cut = len(line) - MAX_MESSAGE_LINE_CHARS
        line = f"{line[:MAX_MESSAGE_LINE_CHARS]} [truncated: {cut:,} more characters]"
    return line


def message_chunks(messages: Sequence[ConversationMessage], max_chars: int) -> Iterator[list[ConversationMessage]]:
    """Consecutive messages whose prompt lines fit `max_chars` together (a longer one goes alone)."""
    chunk: list[ConversationMessage] = []
    size = 0
    for m in messages:
        n = len(message_line(m)) + 1
        if chunk and size + n > max_chars:
            yield chunk
            chunk, size = [], 0
        chunk.append(m)
        size += n
    if chunk:
        yield chunk


# -- the rule-based summarizer (no LLM configured) -----------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_ABOUT_ME = re.compile(
    r"\b(i am|i'm|im|my|i like|i love|i hate|i prefer|i work|i live|i have|i've|i feel|i want|i need)\b", re.I
)
_DECIDED = re.compile(r"\b(i will|i'll|let's|lets|i decided|i've decided|we agreed|i'm going to|i am going to)\b", re.I)
_LATER = re.compile(r"\b(later|tomorrow|next week|remind me|follow up|get back to|to do|todo)\b", re.I)
_NEGATIVE = re.compile(r"\b(frustrat\w*|annoy\w*|angry|upset|sad|stress\w*|anxious|worried|tired|hate)\b", re.I)
_POSITIVE = re.compile(r"\b(thanks|thank you|great|love|glad|happy|awesome|excited|perfect)\b", re.I)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


class RuleBasedConversationSummarizer:
    """A deterministic memory from keyword rules, for running without an LLM (locally, offline).

    It quotes the user's own sentences: what they said about themselves, what they decided, what
    they left for later or asked without an answer; the tone from a few mood words.
    """

    name = "rules"
    model = "rules"

    def summarize_conversation(
        self,
        previous: ConversationMemory | None,
        messages: Sequence[ConversationMessage],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> ConversationSummary:
        learned = list(previous.learned_about_user) if previous else []
        decisions = list(previous.decisions) if previous else []
        open_loops = list(previous.open_loops) if previous else []
        positive = negative = 0
        user_lines = [m for m in messages if m.role == "user"]
        for i, m in enumerate(messages):
            if m.role != "user":
                continue
            answered = any(later.role == "assistant" for later in messages[i + 1 :])
            for sentence in _sentences(m.text):
                question = sentence.endswith("?")
                if _DECIDED.search(sentence) and not question:
                    decisions.append(sentence)
                elif _ABOUT_ME.search(sentence) and not question:
                    learned.append(sentence)
                if _LATER.search(sentence) or (question and not answered):
                    open_loops.append(sentence)
                positive += len(_POSITIVE.findall(sentence))
                negative += len(_NEGATIVE.findall(sentence))
        first = cut_text(" ".join(user_lines[0].text.split()), 160) if user_lines else "no user messages"
        said = f"{len(messages)} messages ({len(user_lines)} from the user), starting with: {first}"
        discussed = f"{previous.discussed} Then {said}" if previous else f"A conversation of {said}"
        tone = "frustrated" if negative > positive else "positive" if positive > negative else "neutral"
        if previous and previous.tone and tone == "neutral":
            tone = previous.tone
        memory = ConversationMemory(
            discussed=discussed, learned_about_user=learned, decisions=decisions, open_loops=open_loops, tone=tone
        ).normalized()
        return ConversationSummary(memory=memory, model=self.model)
