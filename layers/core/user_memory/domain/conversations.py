"""Conversation memories: the schema, the messages, the trigger's batches and one batch's run.

A chat product records each conversation's messages (an activity of kind `message` whose
payload names a `conversation_id`, on the queue or `POST /me/activity`). A conversation is the
pair (user, conversation id): each user names its own conversations, and two users using the same
id have two conversations (`ConversationKey`). Once a conversation has been quiet for longer than
the inactivity threshold and has no memory, or messages newer than its memory, the trigger sends
its key to the worker queue in a GENERATE_MEMORY_BATCH message; the worker summarizes each
conversation of the batch into a `ConversationMemory` and upserts it.

Each item of a batch is isolated: one that is malformed is refused alone, one that fails does not
stop the others, and the caller re-sends the failed ones (`BatchRun.failed_keys`). A conversation
whose memory already covers its last message writes nothing and calls no model, so a re-run or a
duplicate message is a read, never a second memory.

No I/O here: the store, the summarizer and the sender are ports.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from user_memory.errors import DeadlineReached, InvalidDocument, SummarizerError, describe_validation_error

TASK_GENERATE_MEMORY_BATCH = "GENERATE_MEMORY_BATCH"
# SQS's own limit (user_memory.domain.messages.MAX_MESSAGE_BYTES, repeated to keep this module standalone).
MAX_BATCH_MESSAGE_BYTES = 256 * 1024
# Conversations one GENERATE_MEMORY_BATCH message may name. Each is one or more LLM calls, and
# the worker re-sends what it cannot start before its deadline, so this bounds a message's
# size, not its time; the trigger's own default (CONVERSATIONS_PER_MESSAGE) is sized to the time.
MAX_CONVERSATIONS_PER_MESSAGE = 100
MAX_CONVERSATION_ID_CHARS = 200
MAX_MESSAGE_ID_CHARS = 300
DEFAULT_INACTIVITY_THRESHOLD_MINUTES = 120
# A message's line in the prompt is cut beyond this, with a marker saying how much was cut.
MAX_MESSAGE_LINE_CHARS = 4_000
# What a memory may hold (the model is asked for less; longer answers are cut, not refused).
MAX_MEMORY_ITEMS = 20
MAX_MEMORY_ITEM_CHARS = 500
MAX_DISCUSSED_CHARS = 2_000
MAX_TONE_CHARS = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _identifier(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


ConversationId = Annotated[str, Field(min_length=1, max_length=MAX_CONVERSATION_ID_CHARS), AfterValidator(_identifier)]


@dataclass(frozen=True, order=True)
class ConversationKey:
    """A conversation: the user's own id for it. Another user's conversation of the same id is
    another conversation."""

    user_id: uuid.UUID
    conversation_id: str

    def as_json(self) -> dict[str, str]:
        return {"user_id": str(self.user_id), "conversation_id": self.conversation_id}

    def __str__(self) -> str:
        return f"{self.user_id}/{self.conversation_id}"


# -- the memory --------------------------------------------------------------------------------------


class ConversationMemory(BaseModel):
    """What one conversation left behind: the structured memory stored per conversation.

    Strict structured output takes this schema as it is (every field required, no other keys).
    """

    model_config = ConfigDict(extra="forbid")
    discussed: str = Field(description="What the conversation was about, in a few sentences.")
    learned_about_user: list[str] = Field(
        description="Facts, preferences and circumstances the user revealed about themselves, one per item."
    )
    decisions: list[str] = Field(description="What the user decided or agreed to, one per item.")
    open_loops: list[str] = Field(
        description="Questions left unanswered, promises and follow-ups still to do, one per item."
    )
    tone: str = Field(description="The user's tone and mood, in a few words.")

    def normalized(self) -> ConversationMemory:
        """Whitespace trimmed, empty and repeated items dropped, every field cut to its limit."""
        return ConversationMemory(
            discussed=_cut(" ".join(self.discussed.split()), MAX_DISCUSSED_CHARS),
            learned_about_user=_items(self.learned_about_user),
            decisions=_items(self.decisions),
            open_loops=_items(self.open_loops),
            tone=_cut(" ".join(self.tone.split()), MAX_TONE_CHARS),
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _items(values: Iterable[str], limit: int = MAX_MEMORY_ITEMS) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for value in values:
        item = _cut(" ".join(str(value).split()), MAX_MEMORY_ITEM_CHARS)
        key = item.casefold()
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out[-limit:]  # the newest items are kept when a long conversation overflows


def parse_memory(data: Any) -> ConversationMemory:
    """A memory from stored or model-written JSON; InvalidDocument naming the fields when it is not one."""
    try:
        return ConversationMemory.model_validate(data).normalized()
    except ValidationError as err:
        raise InvalidDocument(f"not a conversation memory: {describe_validation_error(err)}") from err


# -- messages and conversations ------------------------------------------------------------------------


class MessagePayload(BaseModel):
    """The payload of an activity of kind `message` that belongs to a conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    conversation_id: ConversationId
    role: Literal["user", "assistant", "system", "tool"]
    text: str


def is_conversation_message(kind: str, payload: Any) -> bool:
    """An activity is a conversation message when its kind is `message` and its payload names a conversation."""
    return kind == "message" and isinstance(payload, dict) and "conversation_id" in payload


@dataclass(frozen=True, kw_only=True)
class NewMessage:
    """A message to record (from an activity of kind `message`)."""

    user_id: uuid.UUID
    conversation_id: str
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str

    def as_json(self) -> dict[str, Any]:
        return {
            "user_id": str(self.user_id),
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "role": self.role,
            "text": self.text,
            "occurred_at": self.occurred_at.isoformat(),
            "source": self.source,
        }


def new_message(
    *, user_id: uuid.UUID, occurred_at: datetime, payload: dict[str, Any], source: str, external_id: str
) -> NewMessage:
    """The message an activity of kind `message` carries; InvalidDocument names what is wrong."""
    try:
        parsed = MessagePayload.model_validate(payload)
    except ValidationError as err:
        raise InvalidDocument(f"a conversation message's payload: {describe_validation_error(err)}") from err
    if len(external_id) > MAX_MESSAGE_ID_CHARS or _CONTROL.search(external_id):
        raise InvalidDocument(f"a message id is 1 to {MAX_MESSAGE_ID_CHARS} characters without control characters")
    if "\x00" in parsed.text:
        raise InvalidDocument("a message's text may not contain U+0000")
    return NewMessage(
        user_id=user_id,
        conversation_id=parsed.conversation_id,
        message_id=external_id,
        role=parsed.role,
        text=parsed.text,
        occurred_at=occurred_at,
        source=source,
    )


@dataclass(frozen=True, kw_only=True)
class ConversationMessage:
    """A stored message: `seq` is its number in its conversation, in the order it was recorded."""

    conversation_id: str
    seq: int
    message_id: str
    role: str
    text: str
    occurred_at: datetime


@dataclass(frozen=True, kw_only=True)
class ConversationState:
    """What the worker reads first: the owner, the message count, and the current memory if any."""

    conversation_id: str
    user_id: uuid.UUID
    messages: int
    last_message_at: datetime
    memory_through: int | None = None
    memory: dict[str, Any] | None = None

    @property
    def key(self) -> ConversationKey:
        return ConversationKey(self.user_id, self.conversation_id)

    @property
    def up_to_date(self) -> bool:
        return (self.memory_through or 0) >= self.messages


@dataclass(frozen=True, kw_only=True)
class StoredMemory:
    """One row of conversation_memories, as other code reads it (the daily summary, the export)."""

    conversation_id: str
    user_id: uuid.UUID
    memory: dict[str, Any]
    last_message_seq: int
    last_message_id: str
    last_message_at: datetime
    model: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class ExportedMessage:
    """A message as the export shows it."""

    seq: int
    message_id: str
    role: str
    text: str
    occurred_at: datetime
    source: str


@dataclass(frozen=True, kw_only=True)
class ExportedConversation:
    """A conversation as the export shows it: its messages in seq order, and its memory."""

    conversation_id: str
    first_message_at: datetime
    last_message_at: datetime
    created_at: datetime
    messages: list[ExportedMessage]
    memory: StoredMemory | None


# -- ports -------------------------------------------------------------------------------------------------


class ConversationStore(Protocol):
    """Where conversations, their messages and memories are kept."""

    def record(self, messages: Sequence[NewMessage]) -> int:
        """Store messages; a repeat of (user_id, conversation_id, message_id) is ignored. Returns rows new."""
        ...

    def pending_pages(self, quiet_before: datetime, *, page_size: int) -> Iterator[list[ConversationKey]]:
        """Pages of conversations whose last message occurred before `quiet_before` and whose
        memory is missing or older than their last message, oldest quiet first."""
        ...

    def state(self, key: ConversationKey) -> ConversationState | None:
        """The conversation and its memory; None when the user has no such conversation (or was erased)."""
        ...

    def messages(
        self, key: ConversationKey, *, after_seq: int, through_seq: int, limit: int
    ) -> list[ConversationMessage]:
        """Messages with after_seq < seq <= through_seq, in seq order, at most `limit`."""
        ...

    def save_memory(
        self, state: ConversationState, memory: dict[str, Any], last: ConversationMessage, *, model: str
    ) -> Literal["written", "unchanged", "missing"]:
        """Upsert the memory as covering messages up to `last` (one statement): `written`, `unchanged`
        when a memory covering as much is recorded already, `missing` when the conversation is gone."""
        ...

    def memories_updated(self, user_id: uuid.UUID, start: datetime, end: datetime) -> list[StoredMemory]:
        """The user's conversation memories updated in [start, end), oldest update first."""
        ...


@dataclass(frozen=True, kw_only=True)
class ConversationSummary:
    """What a summarizer proposes for a conversation, and what it cost."""

    memory: ConversationMemory
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ConversationSummarizer(Protocol):
    """Folds a conversation's new messages into its memory (None: the first memory)."""

    name: str

    def summarize_conversation(
        self,
        previous: ConversationMemory | None,
        messages: Sequence[ConversationMessage],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> ConversationSummary: ...


class Sender(Protocol):
    def send(self, bodies: list[str], *, delay_seconds: int = 0) -> int: ...


class Clock(Protocol):
    def left(self) -> float: ...


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
        first = _cut(" ".join(user_lines[0].text.split()), 160) if user_lines else "no user messages"
        said = f"{len(messages)} messages ({len(user_lines)} from the user), starting with: {first}"
        discussed = f"{previous.discussed} Then {said}" if previous else f"A conversation of {said}"
        tone = "frustrated" if negative > positive else "positive" if positive > negative else "neutral"
        if previous and previous.tone and tone == "neutral":
            tone = previous.tone
        memory = ConversationMemory(
            discussed=discussed, learned_about_user=learned, decisions=decisions, open_loops=open_loops, tone=tone
        ).normalized()
        return ConversationSummary(memory=memory, model=self.model)


# -- the trigger -------------------------------------------------------------------------------------------------


class BatchItem(BaseModel):
    """One conversation a GENERATE_MEMORY_BATCH names: {"user_id": ..., "conversation_id": ...}."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    user_id: uuid.UUID
    conversation_id: ConversationId

    @property
    def key(self) -> ConversationKey:
        return ConversationKey(self.user_id, self.conversation_id)


_BATCH_ITEM: TypeAdapter[BatchItem] = TypeAdapter(BatchItem)


@dataclass(frozen=True, kw_only=True)
class RefusedItem:
    """An item of a GENERATE_MEMORY_BATCH that does not name a conversation: its place in the
    message, what of it can be logged (ids cut and escaped, None when absent or not a string),
    and why (fields named, never values)."""

    position: int
    user_id: str | None
    conversation_id: str | None
    reason: str


def _loggable(value: Any) -> str | None:
    """An id from a malformed item as a log can carry it: escaped, at most 100 characters."""
    if not isinstance(value, str):
        return None
    shown = json.dumps(value, ensure_ascii=True)[1:-1]
    return shown if len(shown) <= 100 else shown[:99] + "…"


class GenerateMemoryBatch(BaseModel):
    """{"task_type": "GENERATE_MEMORY_BATCH", "conversations": [{"user_id": ..., "conversation_id": ...}]}:
    summarize these conversations.

    The message's own shape is checked here (a body that is not this message fails as a whole);
    each item is checked alone by `keys()`, so one malformed item is refused without failing the
    others. `attempt` counts re-sends of conversations that failed (0 for the trigger's and other
    services' messages). The shape before migration 014 (`conversation_ids`, ids alone) is
    refused with a message saying so: an id alone no longer names a conversation.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    task_type: Literal["GENERATE_MEMORY_BATCH"]
    conversations: list[Any] = Field(min_length=1, max_length=MAX_CONVERSATIONS_PER_MESSAGE)
    attempt: int = Field(default=0, ge=0, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _ids_alone(cls, data: Any) -> Any:
        if isinstance(data, dict) and "conversation_ids" in data:
            raise ValueError(
                "conversation_ids (ids alone) is no longer accepted: a conversation is named by its user,"
                ' as "conversations": [{"user_id": ..., "conversation_id": ...}]'
            )
        return data

    def keys(self) -> tuple[list[ConversationKey], list[RefusedItem]]:
        """The conversations named (each once, in order) and the items refused."""
        keys: dict[ConversationKey, None] = {}
        refused: list[RefusedItem] = []
        for n, item in enumerate(self.conversations):
            try:
                keys[_BATCH_ITEM.validate_python(item).key] = None
            except ValidationError as err:
                fields = item if isinstance(item, dict) else {}
                refused.append(
                    RefusedItem(
                        position=n,
                        user_id=_loggable(fields.get("user_id")),
                        conversation_id=_loggable(fields.get("conversation_id")),
                        reason=describe_validation_error(err)[:300],
                    )
                )
        return list(keys), refused


def _item_json(key: ConversationKey) -> str:
    """One item as the body holds it (a UUID needs no escaping; the id is JSON-encoded once)."""
    return f'{{"user_id":"{key.user_id}","conversation_id":{json.dumps(key.conversation_id, ensure_ascii=False)}}}'


def _body(items: Sequence[str], attempt: int) -> str:
    more = f',"attempt":{attempt}' if attempt else ""
    return f'{{"task_type":"{TASK_GENERATE_MEMORY_BATCH}","conversations":[{",".join(items)}]{more}}}'


def batch_body(keys: Sequence[ConversationKey], attempt: int = 0) -> str:
    return _body([_item_json(k) for k in keys], attempt)


def batch_bodies(
    keys: Iterable[ConversationKey],
    *,
    per_message: int,
    max_bytes: int = MAX_BATCH_MESSAGE_BYTES,
    attempt: int = 0,
) -> list[str]:
    """GENERATE_MEMORY_BATCH bodies of at most `per_message` conversations and `max_bytes` bytes each.

    Sizes are measured on the encoded JSON (ids with quotes and escapes), so a body is never over
    the limit whatever the ids hold; each item is encoded once.
    """
    per_message = max(1, min(per_message, MAX_CONVERSATIONS_PER_MESSAGE))
    empty = len(_body([], attempt).encode())
    bodies: list[str] = []
    chunk: list[str] = []
    size = empty
    for key in keys:
        encoded = _item_json(key)
        item = len(encoded.encode()) + (1 if chunk else 0)
        if chunk and (len(chunk) >= per_message or size + item > max_bytes):
            bodies.append(_body(chunk, attempt))
            chunk, size = [], empty
            item -= 1
        if empty + item > max_bytes:
            raise ValueError("a conversation alone does not fit a message")
        chunk.append(encoded)
        size += item
    if chunk:
        bodies.append(_body(chunk, attempt))
    return bodies


@dataclass(frozen=True, kw_only=True)
class TriggerReport:
    quiet_before: datetime
    threshold_minutes: int
    conversations: int
    messages: int
    pages: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "quiet_before": self.quiet_before.isoformat(),
            "threshold_minutes": self.threshold_minutes,
            "conversations": self.conversations,
            "messages": self.messages,
            "pages": self.pages,
        }


def run_trigger(
    store: ConversationStore,
    sender: Sender,
    *,
    threshold: timedelta,
    per_message: int,
    page_size: int = 1000,
    now: datetime | None = None,
) -> TriggerReport:
    """Find every conversation quiet for longer than `threshold` whose memory is missing or stale,
    and send their keys in GENERATE_MEMORY_BATCH messages; a page's messages are sent before the
    next page is read. A failed send raises SendFailed (what was sent stays sent: the worker skips
    conversations whose memory is already current)."""
    started = time.perf_counter()
    quiet_before = (now or datetime.now(UTC)) - threshold
    conversations = messages = pages = 0
    for page in store.pending_pages(quiet_before, page_size=page_size):
        pages += 1
        conversations += len(page)
        messages += sender.send(batch_bodies(page, per_message=per_message))
    return TriggerReport(
        quiet_before=quiet_before,
        threshold_minutes=int(threshold.total_seconds() // 60),
        conversations=conversations,
        messages=messages,
        pages=pages,
        seconds=time.perf_counter() - started,
    )


# -- one batch -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """How a conversation is summarized: attempts at valid output, prompt size, time per call."""

    attempts: int = 2
    max_messages: int = 500
    max_prompt_chars: int = 24_000
    call_timeout: float = 25.0
    call_tries: int = 2
    min_call_seconds: float = 5.0

    @property
    def call_budget(self) -> float:
        """The longest one summarizer call can take: every try at the client's timeout."""
        return self.call_timeout * self.call_tries


class _NoDeadline:
    def left(self) -> float:
        return float("inf")


NO_DEADLINE: Clock = _NoDeadline()


@dataclass(frozen=True, kw_only=True)
class MemoryOutcome:
    """What one conversation's run did: `written`, `unchanged` (current already), `missing` (no such
    conversation), `partial` (time ran out: what was summarized is written, the rest waits)."""

    key: ConversationKey
    status: Literal["written", "unchanged", "missing", "partial"]
    messages: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def _call_timeout(cfg: MemoryConfig, deadline: Clock) -> float:
    budget = min(cfg.call_budget, deadline.left())
    if budget < min(cfg.min_call_seconds, cfg.call_timeout):
        raise DeadlineReached(f"{max(deadline.left(), 0):.1f} s left before the deadline margin; retried later")
    return budget


def _summarize_valid(
    summarizer: ConversationSummarizer,
    previous: ConversationMemory | None,
    chunk: Sequence[ConversationMessage],
    cfg: MemoryConfig,
    deadline: Clock,
    spent: list[int],
) -> ConversationSummary:
    feedback: str | None = None
    for _ in range(cfg.attempts):
        try:
            result = summarizer.summarize_conversation(
                previous, chunk, feedback=feedback, timeout=_call_timeout(cfg, deadline)
            )
        except InvalidDocument as err:  # the answer was not a memory: ask again, once more at most
            spent[0] += 1
            spent[1] += err.prompt_tokens
            spent[2] += err.completion_tokens
            feedback = str(err)  # every error, bounded where it is described (errors.join_problems)
            continue
        spent[0] += 1
        spent[1] += result.prompt_tokens
        spent[2] += result.completion_tokens
        return result
    raise SummarizerError(f"conversation memory output invalid after {cfg.attempts} attempts", detail=feedback)


def generate_memory(
    key: ConversationKey,
    *,
    store: ConversationStore,
    summarizer: ConversationSummarizer,
    cfg: MemoryConfig,
    deadline: Clock = NO_DEADLINE,
) -> MemoryOutcome:
    """Summarize one conversation's messages newer than its memory into its memory, and upsert it.

    Nothing new (the memory covers the last message) is `unchanged` without a model call. Long
    conversations are read `max_messages` at a time and sent in chunks that fit the prompt, each
    folded into the memory so far; if the time runs out between chunks, the memory covering what
    was summarized is written (`partial`) and the conversation stays pending for the next trigger.
    """
    started = time.perf_counter()
    state = store.state(key)
    if state is None:
        return MemoryOutcome(key=key, status="missing")
    if state.up_to_date:
        return MemoryOutcome(key=key, status="unchanged")
    memory = parse_memory(state.memory) if state.memory is not None else None
    spent = [0, 0, 0]
    covered = state.memory_through or 0
    last: ConversationMessage | None = None
    model = summarizer.name
    partial = False
    summarized = 0
    while covered < state.messages and not partial:
        page = store.messages(key, after_seq=covered, through_seq=state.messages, limit=cfg.max_messages)
        if not page:
            break
        for chunk in message_chunks(page, cfg.max_prompt_chars):
            if last is not None and deadline.left() < cfg.call_budget:
                partial = True  # keep what is summarized; the rest waits for the next trigger
                break
            result = _summarize_valid(summarizer, memory, chunk, cfg, deadline, spent)
            memory, model, last = result.memory.normalized(), result.model, chunk[-1]
            covered = last.seq
            summarized += len(chunk)
    if last is None or memory is None:  # the counted messages were not there (erased meanwhile)
        return MemoryOutcome(key=key, status="missing", seconds=time.perf_counter() - started)
    status = store.save_memory(state, memory.model_dump(), last, model=model)
    if status == "written" and covered < state.messages:
        status_out: Literal["written", "unchanged", "missing", "partial"] = "partial"
    else:
        status_out = status
    return MemoryOutcome(
        key=key,
        status=status_out,
        messages=summarized,
        calls=spent[0],
        prompt_tokens=spent[1],
        completion_tokens=spent[2],
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, kw_only=True)
class Failure:
    key: ConversationKey
    error: BaseException


@dataclass(kw_only=True)
class BatchRun:
    """One GENERATE_MEMORY_BATCH's outcome: what each conversation did, which failed (with the
    exception), and which were not started because the invocation's time ran out."""

    outcomes: list[MemoryOutcome] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    deferred: list[ConversationKey] = field(default_factory=list)

    @property
    def failed_keys(self) -> list[ConversationKey]:
        return [f.key for f in self.failures]


def run_batch(
    keys: Sequence[ConversationKey],
    *,
    store: ConversationStore,
    summarizer: ConversationSummarizer,
    cfg: MemoryConfig,
    deadline: Clock = NO_DEADLINE,
) -> BatchRun:
    """Each conversation in turn, isolated: a failure is recorded and the next one starts. Once
    the time left is below one call's worst case (after the first conversation), the rest are
    deferred, not started."""
    run = BatchRun()
    for n, key in enumerate(keys):
        if n > 0 and deadline.left() < cfg.call_budget:
            run.deferred.extend(keys[n:])
            break
        try:
            run.outcomes.append(generate_memory(key, store=store, summarizer=summarizer, cfg=cfg, deadline=deadline))
        except DeadlineReached:
            run.deferred.extend(keys[n:])
            break
        except Exception as err:  # one conversation's failure, whatever it is, must not stop the others
            run.failures.append(Failure(key=key, error=err))
    return run
