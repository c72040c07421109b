"""A typed Python client for the user-memory API (sync `Client`, async `AsyncClient`).

from user_memory_client import Client

with Client("https://memory.example.com", token=get_token) as client:
    memory = client.memory.get()
    client.memory.patch({"personal_info": {"name": "Ann"}}, if_match=memory.version)
    hits = client.memory.search("algebra")
"""

from user_memory_client import errors, models
from user_memory_client._transport import Retries
from user_memory_client.aio import AsyncClient
from user_memory_client.client import Client
from user_memory_client.errors import (
    ApiError,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    InvalidBaseUrl,
    InvalidDocument,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    RateLimited,
    ServerError,
    TransportError,
    Unauthenticated,
    Unavailable,
    UserMemoryError,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "Conflict",
    "DeadlineExceeded",
    "Forbidden",
    "InvalidBaseUrl",
    "InvalidDocument",
    "InvalidInput",
    "NotFound",
    "PreconditionFailed",
    "RateLimited",
    "Retries",
    "ServerError",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "UserMemoryError",
    "errors",
    "models",
]
