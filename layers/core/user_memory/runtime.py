"""What a handler needs, built once per cold start from validated settings (never at import time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from user_memory.config import Settings
from user_memory.pipeline import PipelineConfig
from user_memory.store import MemoryStore


def _secret(name: str | None, parameter: str | None) -> str | None:
    """Read a secret with Powertools Parameters (cached), from Secrets Manager or SSM."""
    if name:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_secret(name, max_age=300))
    if parameter:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_parameter(parameter, decrypt=True, max_age=300))
    return None


def database_url(settings: Settings) -> str:
    url = settings.database_url or _secret(settings.database_secret_name, settings.database_url_parameter)
    if not url:
        from user_memory.config import ConfigError

        raise ConfigError("no database: set DATABASE_URL, DATABASE_SECRET_NAME or DATABASE_URL_PARAMETER")
    return url


@dataclass
class Runtime:
    settings: Settings
    conn: psycopg.Connection
    store: MemoryStore
    summarizer: Any
    pipeline: PipelineConfig
    sqs: Any = None

    @classmethod
    def build(cls, settings: Settings, *, sqs: Any = None, summarizer: Any = None) -> Runtime:
        conn = psycopg.connect(database_url(settings), autocommit=True)
        store = MemoryStore(
            conn,
            checkpoint_interval=settings.checkpoint_interval,
            max_document_bytes=settings.max_document_bytes,
        )
        if summarizer is None:
            if settings.summarizer_kind == "openai":
                from user_memory.summarizer.openai_summarizer import OpenAISummarizer

                key = _secret(settings.openai_api_key_secret_name, settings.openai_api_key_parameter)
                summarizer = OpenAISummarizer.from_settings(settings, api_key=key)
            else:
                from user_memory.summarizer.rules import RuleBasedSummarizer

                summarizer = RuleBasedSummarizer()
        return cls(settings, conn, store, summarizer, PipelineConfig.from_settings(settings), sqs)

    @property
    def usable(self) -> bool:
        """False once the database connection is closed or broken: the handler builds anew."""
        return not (self.conn.closed or self.conn.broken)

    def close(self) -> None:
        self.conn.close()
