"""moto's SQS queue, with its scans of every message made proportional to the messages in flight.

moto keeps a queue as a list and, on every call, walks all of it several times: each receive
lists the visible messages (reading the clock twice per message through datetime objects), reads
the queue's attributes for each message received (three more walks each, for the approximate
counts), each send reads them once more, and each delete rebuilds the list. With the night's
100k messages queued at once the simulation would measure moto, quadratically, not the service.

`linear_sqs()` patches, for the block, only how moto finds things, not what it answers:
- the clock moto's SQS reads is `time.time()` (the same value, without building datetimes);
- a receive walks the queue lazily and stops at the batch it needs, as before it stopped
  appending (the list of visible messages is not built first);
- a message's retention is checked against the queue's retention period directly, and a send's
  look at ContentBasedDeduplication does not count the queue's messages;
- a delete finds its message among the messages in flight (a received message is in flight
  until deleted or visible again) before walking the queue as moto does.
GetQueueAttributes still counts every message, as SQS's approximate counts do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.sqs import models

_counting = threading.local()


def _now_seconds(dt: Any = None) -> float:
    return time.time() if dt is None else _ORIGINAL["unix_time"](dt)


def _now_millis(dt: Any = None) -> float:
    return time.time() * 1000.0 if dt is None else _ORIGINAL["unix_time_millis"](dt)


class _Visible:
    """The queue's visible, undelayed messages, walked on demand (len() still counts them all)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def __iter__(self) -> Iterator[Any]:
        return (m for m in self.queue._messages if m.visible and not m.delayed)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return any(True for _ in self)


def _messages(self: Any) -> _Visible:
    return _Visible(self)


def _retained(self: Any, queue_name: str, message: Any) -> bool:
    queue = self.get_queue(queue_name)
    return bool(int(queue.message_retention_period) + message.sent_timestamp / 1000 > time.time())


def _count(name: str) -> property:
    original = _ORIGINAL[name]

    def get(self: Any) -> int:
        return 0 if getattr(_counting, "off", False) else original.fget(self)

    return property(get)


def _send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
    # A send reads the queue's attributes only for ContentBasedDeduplication: no counts needed.
    _counting.off = True
    try:
        return _ORIGINAL["send_message"](self, *args, **kwargs)
    finally:
        _counting.off = False


def _delete_message(self: Any, receipt_handle: str) -> None:
    if receipt_handle not in self.deleted_messages:
        for message in list(self.pending_messages):
            if message.had_receipt_handle(receipt_handle):
                self.pending_messages.discard(message)
                self.deleted_messages.update(message.all_receipt_handles)
                self._messages.remove(message)
                return
    _ORIGINAL["delete_message"](self, receipt_handle)


_ORIGINAL: dict[str, Any] = {
    "unix_time": models.unix_time,
    "unix_time_millis": models.unix_time_millis,
    "messages": models.Queue.messages,
    "retained": models.SQSBackend.is_message_valid_based_on_retention_period,
    "send_message": models.SQSBackend.send_message,
    "delete_message": models.Queue.delete_message,
    "approximate_number_of_messages": models.Queue.approximate_number_of_messages,
    "approximate_number_of_messages_not_visible": models.Queue.approximate_number_of_messages_not_visible,
    "approximate_number_of_messages_delayed": models.Queue.approximate_number_of_messages_delayed,
}


@contextmanager
def linear_sqs() -> Iterator[None]:
    """moto's SQS patched as the module docstring says, for the block."""
    models.unix_time = _now_seconds  # type: ignore[assignment]
    models.unix_time_millis = _now_millis  # type: ignore[assignment]
    models.Queue.messages = property(_messages)  # type: ignore[assignment,method-assign]
    models.SQSBackend.is_message_valid_based_on_retention_period = _retained  # type: ignore[method-assign]
    models.SQSBackend.send_message = _send_message  # type: ignore[method-assign]
    models.Queue.delete_message = _delete_message  # type: ignore[method-assign]
    for name in (
        "approximate_number_of_messages",
        "approximate_number_of_messages_not_visible",
        "approximate_number_of_messages_delayed",
    ):
        setattr(models.Queue, name, _count(name))
    try:
        yield
    finally:
        models.unix_time = _ORIGINAL["unix_time"]
        models.unix_time_millis = _ORIGINAL["unix_time_millis"]
        models.Queue.messages = _ORIGINAL["messages"]  # type: ignore[method-assign]
        models.SQSBackend.is_message_valid_based_on_retention_period = _ORIGINAL["retained"]  # type: ignore[method-assign]
        models.SQSBackend.send_message = _ORIGINAL["send_message"]  # type: ignore[method-assign]
        models.Queue.delete_message = _ORIGINAL["delete_message"]  # type: ignore[method-assign]
        for name in (
            "approximate_number_of_messages",
            "approximate_number_of_messages_not_visible",
            "approximate_number_of_messages_delayed",
        ):
            setattr(models.Queue, name, _ORIGINAL[name])
