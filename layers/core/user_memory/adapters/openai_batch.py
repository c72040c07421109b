"""OpenAI's Batch API for the nightly summaries (SUMMARY_DELIVERY=batch), with the real `openai` client.

Submitting: each user's request is the chat completion body the online summarizer would send
(`OpenAISummarizer.request`), one JSONL line {"custom_id": <user id>, "method": "POST", "url":
"/v1/chat/completions", "body": ...}; the file is uploaded (Files API, purpose "batch") and a
batch created on it (completion_window 24h). Every call goes through `call_within` with the
worker's call limits, inside the deadline in scope (adapters/openai_calls.py); the batch's
creation is not retried (a retry after a timeout could create a second batch for the same users).

Collecting: the batch's output file has one line per request that got an answer,
{"custom_id", "response": {"status_code", "body"}, "error"}; its error file one per request
that failed (an expired batch's unanswered requests included). `PrecomputedAnswers` serves an
output's answer to the pipeline exactly when the pipeline asks for the very request it answers
(the body's SHA-256), through the online summarizer's own checks (`OpenAISummarizer.read_answer`);
any other call (a retry with feedback, a request the batch has no answer for, a head or activity
that changed the prompt) goes to the online summarizer.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from user_memory.adapters import openai_calls as calls
from user_memory.adapters.openai_summarizer import OpenAISummarizer
from user_memory.domain.model import Activity
from user_memory.domain.ports import SummaryResult
from user_memory.errors import BatchUnavailable, InvalidDocument

BATCH_URL = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
# A batch in one of these is still going; in any other (completed, expired, failed, cancelled) it
# has ended and its files say what it answered.
RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


def request_sha256(body: dict[str, Any]) -> str:
    """The SHA-256 of a request body's canonical JSON: the same request, the same digest."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def batch_line(custom_id: str, body: dict[str, Any]) -> str:
    """One request of a batch's input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": BATCH_URL, "body": body}
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class BatchState:
    """What the endpoint says of a batch."""

    id: str
    status: str
    created_at: float = 0.0  # Unix seconds
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def running(self) -> bool:
        return self.status in RUNNING


@dataclass(frozen=True)
class BatchOutput:
    """A batch's answers by custom_id (each a chat completion's body), and why the others failed."""

    answers: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def parse_output(*texts: str) -> BatchOutput:
    """The output and error files' lines: an answer for each line with status 200 and a body; a
    failure (its error code, or its HTTP status) for every other. A line that is not JSON is skipped."""
    answers: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for text in texts:
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
                continue
            response: dict[str, Any] = line["response"] if isinstance(line.get("response"), dict) else {}
            error: dict[str, Any] = line["error"] if isinstance(line.get("error"), dict) else {}
            if response.get("status_code") == 200 and isinstance(response.get("body"), dict) and not error:
                answers[line["custom_id"]] = response["body"]
                continue
            code = error.get("code") or f"HTTP {response.get('status_code', '?')}"
            failed.setdefault(line["custom_id"], str(code)[:100])
    for custom_id in answers:
        failed.pop(custom_id, None)
    return BatchOutput(answers=answers, failed=failed)


def batch_unavailable(err: Exception, per_try: float) -> BatchUnavailable:
    """A Batch or Files API call's failure, named by what happened."""
    if isinstance(err, openai.APITimeoutError):
        return BatchUnavailable(f"the Batch API timed out after {per_try:.1f} s")
    if isinstance(err, openai.APIConnectionError):
        return BatchUnavailable("cannot reach the Batch API")
    return BatchUnavailable(f"the Batch API answered HTTP {getattr(err, 'status_code', '?')}")


class OpenAIBatches:
    """The Files and Batches endpoints, through the summarizer's client and call limits."""

    def __init__(
        self,
        client: Any,
        *,
        timeout: float = 25.0,
        max_retries: int = 1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep

    @classmethod
    def of(cls, summarizer: OpenAISummarizer) -> OpenAIBatches:
        return cls(summarizer.client, timeout=summarizer.timeout, max_retries=summarizer.max_retries)

    def _call(self, call: Callable[[Any], Any], budget: float | None, *, retries: int | None = None) -> Any:
        def once(per_try: float) -> Any:
            return call(self.client.with_options(timeout=per_try, max_retries=0))

        return calls.call_within(
            once,
            timeout=self.timeout,
            max_retries=self.max_retries if retries is None else retries,
            budget=budget,
            failure=batch_unavailable,
            sleep=self.sleep,
        )

    def submit(self, lines: list[str], *, run_key: str, budget: float | None = None) -> str:
        """Upload the requests and create their batch; its id."""
        data = ("\n".join(lines) + "\n").encode()
        uploaded = self._call(
            lambda c: c.files.create(file=("summaries.jsonl", data, "application/jsonl"), purpose="batch"), budget
        )
        batch = self._call(
            lambda c: c.batches.create(
                input_file_id=uploaded.id,
                endpoint=BATCH_URL,
                completion_window=COMPLETION_WINDOW,
                metadata={"run_key": run_key[:512]},
            ),
            budget,
            retries=0,
        )
        return str(batch.id)

    def state(self, batch_id: str, budget: float | None = None) -> BatchState:
        """The batch's status and files."""
        batch = self._call(lambda c: c.batches.retrieve(batch_id), budget)
        return BatchState(
            id=batch.id,
            status=batch.status,
            created_at=float(batch.created_at),
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
        )

    def cancel(self, batch_id: str, budget: float | None = None) -> None:
        """Ask the endpoint to stop a batch (what it completed before stopping is still billed)."""
        self._call(lambda c: c.batches.cancel(batch_id), budget)

    def output(self, state: BatchState, budget: float | None = None) -> BatchOutput:
        """What an ended batch answered (its output file) and what failed (its error file)."""
        texts = []
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id:
                texts.append(self._content(file_id, budget))
        return parse_output(*texts)

    def _content(self, file_id: str, budget: float | None) -> str:
        return str(self._call(lambda c: c.files.content(file_id), budget).text)


class PrecomputedAnswers:
    """A summarizer that answers from a batch's output where it holds the answer to the very
    request asked, and asks the online summarizer otherwise (the fact floor's retry included).

    Args:
        answers: chat completion bodies by the SHA-256 of the request they answer.
    """

    leaves_input_unchanged = True  # as the online summarizer's (ports.Summarizer)
    answers_json_values = True

    def __init__(self, online: OpenAISummarizer, answers: dict[str, Any]) -> None:
        self.online = online
        self.answers = answers
        self.name = online.name
        self.served = 0  # answers taken from the batch
        self.asked_online = 0

    @property
    def model(self) -> str:
        return self.online.model

    def summarize(
        self,
        document: dict[str, Any],
        activities: list[Activity],
        *,
        feedback: str | None = None,
        timeout: float | None = None,
    ) -> SummaryResult:
        body, lines = self.online.request(document, activities, feedback)
        answer = self.answers.get(request_sha256(body))
        if answer is None:
            self.asked_online += 1
            return self.online.summarize(document, activities, feedback=feedback, timeout=timeout)
        self.served += 1
        try:
            response = ChatCompletion.model_validate(answer)
        except ValidationError as err:  # the pipeline asks again (online), as for any unreadable answer
            raise InvalidDocument("the batch's answer is not a chat completion") from err
        return self.online.read_answer(response, body["messages"], lines, document)


@dataclass(frozen=True)
class SummaryBatches:
    """What the worker needs for SUMMARY_DELIVERY=batch: the claims, the endpoint, the online
    summarizer (requests are built, answers checked and fallbacks made by it) and the polling."""

    requests: Any  # adapters.summary_batches.PostgresBatchRequests
    endpoint: OpenAIBatches
    online: OpenAISummarizer
    poll_seconds: int = 900
    give_up_seconds: float = 26 * 3600
