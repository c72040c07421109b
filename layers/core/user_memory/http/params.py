"""Parameters more than one resource's routes take, declared once (their OpenAPI text included)."""

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from user_memory.domain.companion.times import StorableDate, StorableTime
from user_memory.domain.model import MAX_VERSION

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
