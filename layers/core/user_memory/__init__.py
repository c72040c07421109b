"""user-memory: an evolving, versioned memory of every user of an AI product."""

from user_memory.errors import (
    DocumentTooLarge,
    InvalidDocument,
    PatchError,
    UnknownVersion,
    UserMemoryError,
    VersionConflict,
)

__all__ = [
    "DocumentTooLarge",
    "InvalidDocument",
    "PatchError",
    "UnknownVersion",
    "UserMemoryError",
    "VersionConflict",
]
