"""A user's account as a whole: the erasure's receipt, and where finished exports live.

An erasure answers a receipt (`ErasureReceipt`): rows deleted per relation, when, at whose
request and a salted hash of the user id, never content; the database stores it in the same
transaction as the deletes (migration 027). Exports are files of JSON Lines written outside the
database (`ExportObjects`: S3, or a folder locally), so an erasure deletes them first and counts
them in its receipt (`export_objects`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# Who asked for an erasure: the end user itself, an operator (by the token's subject), the CLI.
REQUESTED_BY_SELF = "self"
MAX_REQUESTER_CHARS = 300


def operator_requester(subject: str) -> str:
    """The receipt's requester for an operator acting through the API."""
    return f"operator:{subject}"[:MAX_REQUESTER_CHARS]


@dataclass(frozen=True, kw_only=True)
class ErasureReceipt:
    """What an erasure deleted (rows per relation, export objects), when, at whose request."""

    id: str
    user_hash: str
    erased_at: datetime
    requested_by: str
    deleted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "user_hash": self.user_hash,
            "erased_at": self.erased_at,
            "requested_by": self.requested_by,
            "deleted": dict(self.deleted),
        }


class ExportObjects(Protocol):
    """Where an export's JSON Lines go: S3 (adapters/exports.py) or a local folder."""

    def write(self, key: str, lines: Iterator[bytes]) -> int:
        """Store the lines under `key`, streaming; the bytes written."""
        ...

    def url(self, key: str, *, expires_in: int) -> str:
        """A URL that reads the object without credentials (pre-signed), valid `expires_in` seconds."""
        ...

    def delete(self, keys: list[str]) -> int:
        """Delete the objects (a missing one is not an error); how many were asked to go."""
        ...

    def read(self, key: str) -> Iterator[bytes]:
        """The object's lines, streaming (an import reads an export back)."""
        ...

    def upload_url(self, key: str, *, expires_in: int) -> str:
        """Where a client puts an object without credentials (a pre-signed PUT; locally a file path)."""
        ...
