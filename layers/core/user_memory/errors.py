"""Domain exceptions: every failure a caller can act on has a name here."""

from __future__ import annotations


class UserMemoryError(Exception):
    """Base class of every error this library raises on purpose."""


class PatchError(UserMemoryError, ValueError):
    """A JSON Patch or JSON Pointer is invalid, or does not apply to the document."""


class InvalidDocument(UserMemoryError, ValueError):
    """A memory document does not validate against its schema."""


class DocumentTooLarge(InvalidDocument):
    """A memory document exceeds the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"document is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class VersionConflict(UserMemoryError):
    """The writer's expected_version is not the user's current version."""

    def __init__(self, user_id: str, expected: int, current: int) -> None:
        super().__init__(f"user {user_id}: expected version {expected}, current version is {current}")
        self.user_id = user_id
        self.expected = expected
        self.current = current


class UnknownVersion(UserMemoryError, LookupError):
    """The requested version does not exist for this user."""

    def __init__(self, user_id: str, version: int, head: int) -> None:
        super().__init__(f"user {user_id} has no version {version} (versions 0..{head} exist)")
        self.user_id = user_id
        self.version = version
        self.head = head


class InvalidUserId(UserMemoryError, ValueError):
    """A user id is not a UUID."""


class MigrationError(UserMemoryError):
    """A migration failed, or an applied migration file was changed afterwards."""


class GuardrailRefused(UserMemoryError):
    """An update would remove a large part of the memory and the activity did not ask for it."""


class SummarizerError(UserMemoryError):
    """The summarizer could not produce a valid next document."""


class InvalidMessage(UserMemoryError, ValueError):
    """A queue message does not match any known message type."""
