"""Settings read from the environment once, validated, and passed down; domain code never reads os.environ."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from user_memory.errors import UserMemoryError


class ConfigError(UserMemoryError):
    """The environment does not describe a valid configuration."""


class Settings(BaseModel):
    """Every setting, with the environment variable that sets it (the field name, upper-cased)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # database
    database_url: str | None = None
    database_secret_name: str | None = Field(
        default=None, description="Secrets Manager secret (ARN or name) holding the DSN, read in Lambda"
    )
    database_url_parameter: str | None = Field(default=None, description="SSM SecureString holding the DSN")
    checkpoint_interval: int = Field(default=50, ge=1)
    max_document_bytes: int = Field(default=256 * 1024, ge=1024)
    document_schema: str = "user_state"

    # queue
    queue_url: str | None = None
    users_per_message: int = Field(default=1, ge=1, le=100)
    fanout_page_size: int = Field(default=1000, ge=1, le=10_000)
    window_hours: int = Field(default=24, ge=1, le=24 * 31)

    # summarizer
    summarizer: Literal["auto", "openai", "rules"] = "auto"
    openai_api_key: str | None = None
    openai_api_key_secret_name: str | None = None
    openai_api_key_parameter: str | None = None
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"
    openai_temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    openai_timeout_seconds: float = Field(default=60.0, gt=0)
    openai_max_retries: int = Field(default=2, ge=0, le=10)
    summarizer_attempts: int = Field(default=3, ge=1, le=10)
    max_activities_per_run: int = Field(default=500, ge=1)

    # worker
    guardrail_max_removed_parts_share: float = Field(default=0.5, ge=0.0, le=1.0)
    guardrail_min_parts: int = Field(default=4, ge=1)
    deadline_margin_ms: int = Field(default=15_000, ge=0)
    lambda_timeout_seconds: float = Field(default=120.0, gt=0)

    @model_validator(mode="after")
    def _timeouts(self) -> Settings:
        if self.openai_timeout_seconds >= self.lambda_timeout_seconds:
            raise ValueError(
                f"openai_timeout_seconds ({self.openai_timeout_seconds}) must be below "
                f"lambda_timeout_seconds ({self.lambda_timeout_seconds})"
            )
        has_key = self.openai_api_key or self.openai_api_key_secret_name or self.openai_api_key_parameter
        if self.summarizer == "openai" and not (has_key or self.openai_base_url):
            raise ValueError("SUMMARIZER=openai needs OPENAI_API_KEY (or its secret or parameter) or OPENAI_BASE_URL")
        return self

    @property
    def summarizer_kind(self) -> Literal["openai", "rules"]:
        """The summarizer to use: `auto` means OpenAI when a key or an endpoint is configured."""
        if self.summarizer != "auto":
            return self.summarizer
        configured = self.openai_api_key or self.openai_api_key_secret_name or self.openai_api_key_parameter
        return "openai" if configured or self.openai_base_url else "rules"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from environment variables (upper-cased field names) plus overrides."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = env.get(name.upper())
            if raw not in (None, ""):
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])).upper() or 'settings'}: {e['msg']}" for e in err.errors()
            )
            raise ConfigError(f"invalid configuration: {problems}") from err
