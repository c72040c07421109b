"""The composition root: adapters composed into the domain once per process (a Lambda cold start).

Never at import time: a handler builds its services on its first invocation, tests and the
local kit build them with what they want instead (a pool, a summarizer, an SQS client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import ConnectionPool

from user_memory.adapters.postgres import PostgresActivity, PostgresRecorder, open_pool
from user_memory.adapters.sqs import SqsSender
from user_memory.config import DatabaseSettings, FanoutSettings, WorkerSettings
from user_memory.domain.pipeline import PipelineConfig
from user_memory.domain.ports import Summarizer
from user_memory.domain.repository import MemoryStore
from user_memory.errors import ConfigError


def _secret(name: str | None, parameter: str | None) -> str | None:
    """Read a secret with Powertools Parameters (cached 5 minutes), from Secrets Manager or SSM."""
    if not (name or parameter):
        return None
    from aws_lambda_powertools.utilities import parameters

    if name:
        return str(parameters.get_secret(name, max_age=300))
    return str(parameters.get_parameter(parameter, decrypt=True, max_age=300))  # type: ignore[arg-type]


def database_url(settings: DatabaseSettings) -> str:
    """The DSN: DATABASE_URL, else the secret, else the SSM parameter."""
    url = settings.database_url or _secret(settings.database_secret_name, settings.database_url_parameter)
    if not url:
        raise ConfigError("no database: set DATABASE_URL, DATABASE_SECRET_NAME or DATABASE_URL_PARAMETER")
    return url


def build_summarizer(settings: WorkerSettings) -> Summarizer:
    """OpenAI (or a compatible endpoint) when configured, else the rule-based summarizer."""
    if settings.summarizer_kind == "openai":
        from user_memory.adapters.openai_summarizer import OpenAISummarizer  # only when used: cold start

        key = _secret(settings.openai_api_key_secret_name, settings.openai_api_key_parameter)
        return OpenAISummarizer.from_settings(settings, api_key=key)
    from user_memory.domain.rules import RuleBasedSummarizer

    return RuleBasedSummarizer()


@dataclass(kw_only=True)
class WorkerServices:
    """What the worker needs."""

    settings: WorkerSettings
    store: MemoryStore
    activity: PostgresActivity
    summarizer: Summarizer
    pipeline: PipelineConfig
    pool: ConnectionPool | None = field(default=None, repr=False)

    def close(self) -> None:
        """Close the pool this object opened (a given pool belongs to the caller)."""
        if self.pool is not None:
            self.pool.close()


def build_worker(
    settings: WorkerSettings, *, summarizer: Summarizer | None = None, pool: ConnectionPool | None = None
) -> WorkerServices:
    """Compose the worker's services; a given pool stays the caller's to close."""
    summarizer = summarizer or build_summarizer(settings)  # before the pool: a bad key fails first
    owned = pool is None
    pool = pool or open_pool(database_url(settings))
    return WorkerServices(
        settings=settings,
        store=MemoryStore(
            PostgresRecorder(pool),
            checkpoint_interval=settings.checkpoint_interval,
            max_document_bytes=settings.max_document_bytes,
        ),
        activity=PostgresActivity(pool),
        summarizer=summarizer,
        pipeline=settings.pipeline(),
        pool=pool if owned else None,
    )


@dataclass(kw_only=True)
class FanoutServices:
    """What the fan-out needs."""

    settings: FanoutSettings
    activity: PostgresActivity
    sender: SqsSender
    pool: ConnectionPool | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def build_fanout(
    settings: FanoutSettings, *, sqs_client: Any = None, pool: ConnectionPool | None = None
) -> FanoutServices:
    """Compose the fan-out's services; the SQS client is built here once unless given."""
    if sqs_client is None:
        import boto3

        sqs_client = boto3.client("sqs")
    owned = pool is None
    pool = pool or open_pool(database_url(settings))
    return FanoutServices(
        settings=settings,
        activity=PostgresActivity(pool),
        sender=SqsSender(settings.queue_url, sqs_client),
        pool=pool if owned else None,
    )
