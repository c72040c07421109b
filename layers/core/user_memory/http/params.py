"""Parameters more than one resource's routes take, declared once (their OpenAPI text included)."""

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query

from user_memory.domain.companion.times import StorableDate, StorableTime
from user_memory.domain.model import MAX_VERSION
from user_memory.errors import InvalidRequest

# Reading the memory (the caller's and, for operators, anyone's)
Version = Annotated[int | None, Query(ge=0, description="A past version (0: the empty document).")]
AsOf = Annotated[StorableTime | None, Query(description="The version current at this time (ISO 8601 with zone).")]
Limit = Annotated[int, Query(ge=1, le=500)]
Before = Annotated[int | None, Query(ge=1, le=MAX_VERSION, description="Only versions below this one (the cursor).")]
From = Annotated[int, Query(alias="from", ge=0)]
To = Annotated[int, Query(alias="to", ge=0)]
Since = Annotated[int, Query(ge=0, description="The version the client holds.")]

# Writing it (the memory document and the companion elements)
IfMatch = Annotated[
    str | None,
    Header(alias="If-Match", description='The version this edit is based on ("7"); stale: 412.'),
]
IdemKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="A repeat with the same key writes nothing again."),
]

# The companion's reads (the caller's and, for operators, anyone's)
Day = Annotated[StorableDate | None, Query(description="A calendar day (YYYY-MM-DD); default: the user's today.")]
RangeFrom = Annotated[StorableTime | None, Query(alias="from", description="Range start (with zone); default now.")]
RangeTo = Annotated[StorableTime | None, Query(alias="to", description="Range end (with zone); default from + 7 days.")]

# Search over memory items (the caller's, a user's for operators, across users)
SearchQuery = Annotated[str, Query(min_length=1, max_length=500, description="What to look for.")]
SearchK = Annotated[int, Query(ge=1, le=100, description="How many items.")]
SearchMode = Annotated[
    Literal["auto", "fts", "vector", "fused"],
    Query(description="auto: fused when embeddings are configured, else full text."),
]


# Operators' views of a user (/admin/users/<user_id>/...)
UserId = Annotated[str, Path(description="The user's id (a UUID).")]

# The console's figures and pages (the caller's and, for operators, anyone's)
Days = Annotated[int, Query(ge=1, le=366, description="Figures per UTC day over this many days.")]
ConversationLimit = Annotated[int, Query(ge=1, le=100)]
ConversationCursor = Annotated[
    str | None, Query(min_length=1, max_length=600, description="The cursor: `next_after` of the previous page.")
]


def encode_cursor(at: datetime, name: str) -> str:
    """A page's cursor (`next_after`): base64url of [a time, a name] (a conversation id, a run key)."""
    return base64.urlsafe_b64encode(json.dumps([at.isoformat(), name]).encode()).decode()


def decode_cursor(text: str | None) -> tuple[datetime, str] | None:
    """The cursor `encode_cursor` gave: base64url of [time with zone, name]."""
    if text is None:
        return None
    try:
        at, name = json.loads(base64.urlsafe_b64decode(text.encode()))
        moment = datetime.fromisoformat(at)
    except (ValueError, TypeError, binascii.Error, RecursionError):
        raise InvalidRequest("after is not a cursor this API gave (next_after)") from None
    if not isinstance(name, str) or moment.tzinfo is None:
        raise InvalidRequest("after is not a cursor this API gave (next_after)")
    return moment, name
