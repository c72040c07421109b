"""Settings per function, read from the environment once, validated; domain code never reads os.environ.

Each field is set by the environment variable of its name upper-cased (pydantic-settings; an
empty variable counts as unset). Defaults are defined here once (or in user_memory.domain.model
for the store's own).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from user_memory.domain.conversations.model import (
    DEFAULT_INACTIVITY_THRESHOLD_MINUTES,
    MAX_CONVERSATIONS_PER_MESSAGE,
    MAX_INACTIVITY_THRESHOLD_MINUTES,
)
from user_memory.domain.cost import MIN_TOKENS_PER_USER_DAY, Prices
from user_memory.domain.costs import LLM_SECONDS_PER_CALL
from user_memory.domain.expiry import ExpiryPolicy
from user_memory.domain.kv import MAX_AGE_DAYS_LIMIT, validate_max_age_days, validate_namespace
from user_memory.domain.messages import MAX_USERS_PER_MESSAGE
from user_memory.domain.model import (
    DEFAULT_CHECKPOINT_INTERVAL,
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_MAX_PROMPT_ACTIVITY_TOKENS,
)
from user_memory.domain.plan import (
    DEFAULT_LLM_CONCURRENCY,
    MAX_BATCH_SIZE,
    MAX_LLM_CONCURRENCY,
    MAX_LLM_SECONDS,
    MAX_WORKER_CONCURRENCY,
    MIN_WORKER_CONCURRENCY,
    QUEUE_RETENTION_SECONDS,
    users_per_second,
)
from user_memory.errors import ConfigError, describe_validation_error

if TYPE_CHECKING:  # the worker's alone: the other functions' cold imports stay without the summary pipeline
    from user_memory.domain.conversations.batch import MemoryConfig
    from user_memory.domain.summary.pipeline import PipelineConfig

# The environment `from_env` was given (tests and the local kit pass their own); None: os.environ.
_environ: ContextVar[Mapping[str, str] | None] = ContextVar("user_memory_environ", default=None)


class _UpperCaseEnv(PydanticBaseSettingsSource):
    """Each field from the variable of its name upper-cased (empty: unset), in os.environ or `from_env`'s mapping."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        given = _environ.get()
        value = (os.environ if given is None else given).get(field_name.upper())
        return (value or None), field_name, False

    def __call__(self) -> dict[str, Any]:
        found = (self.get_field_value(field, name) for name, field in self.settings_cls.model_fields.items())
        return {name: value for value, name, _ in found if value is not None}


class TracingSettings(BaseSettings):
    """Whether the X-Ray SDK traces the handlers; the base of every function's settings."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    # Lambda's active tracing records every invocation without it; true adds Powertools' Tracer
    # (handler subsegment, cold-start annotation, traced AWS calls) at ~0.2 s per cold start.
    xray_sdk_tracing: bool = False

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments first, then the environment; no .env file, no secrets directory."""
        return init_settings, _UpperCaseEnv(settings_cls)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Self:
        """Build settings from environment variables (os.environ, or `environ`) plus overrides (None: unset).

        Raises ConfigError naming every invalid variable.
        """
        values: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        token = _environ.set(environ)
        try:
            return cls(**values)
        except ValidationError as err:
            raise ConfigError(f"invalid configuration: {describe_validation_error(err, env_names=True)}") from err
        finally:
            _environ.reset(token)


class DatabaseSettings(TracingSettings):
    """Where the database is; the base of every database function's settings."""

    # Where the DSN comes from: DATABASE_URL wins, else the login's secret (JSON username and
    # password, read at run time and anew after an authentication failure: a rotated password
    # needs no redeploy) on DATABASE_ENDPOINT, else a DSN secret, else the SSM parameter.
    database_url: str | None = Field(default=None, repr=False)
    database_login_secret_name: str | None = None
    # The address without credentials: postgresql://host:port/dbname?sslmode=... (the login's
    # secret gives user and password).
    database_endpoint: str | None = None
    database_secret_name: str | None = None
    database_url_parameter: str | None = None
    # The service's role, e.g. service_role. The worker, fan-out and retention take it on every
    # connection after login (SET ROLE); the API takes it only inside an operator's transaction
    # (SET LOCAL), its connections otherwise staying its login, which holds nothing (migration
    # 013): a request that names no end user and no operator reads nothing.
    database_role: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_]{0,62}$")

    @model_validator(mode="after")
    def _endpoint(self) -> Self:
        if self.database_login_secret_name and not (self.database_url or self.database_endpoint):
            raise ValueError(
                "DATABASE_LOGIN_SECRET_NAME needs DATABASE_ENDPOINT (postgresql://host:port/dbname?sslmode=...)"
            )
        return self


class MemorySettings(DatabaseSettings):
    """What every writer of memory documents shares: the store's policy and the deployment's schema."""

    checkpoint_interval: int = Field(default=DEFAULT_CHECKPOINT_INTERVAL, ge=1)
    max_document_bytes: int = Field(default=DEFAULT_MAX_DOCUMENT_BYTES, ge=1024)
    document_schema: str = "user_state"


class EmbeddingSettings(DatabaseSettings):
    """Search's embeddings (optional): with EMBEDDING_MODEL set, item texts are embedded through an
    OpenAI-compatible endpoint and search fuses vector and full-text rankings; without, search is
    PostgreSQL full text only (offline)."""

    embedding_model: str | None = None
    embedding_base_url: str | None = None  # default: OpenAI's
    embedding_api_key: str | None = Field(default=None, repr=False)
    embedding_api_key_secret_name: str | None = None
    embedding_timeout_seconds: float = Field(default=10.0, gt=0, le=60)


class ExportSettings(DatabaseSettings):
    """Asynchronous exports (POST /me/export): where their JSON Lines go. EXPORT_BUCKET (S3) in a
    deployment, else EXPORT_DIR (a folder: the local kit's $USER_MEMORY_HOME/exports); neither:
    the routes answer 404 not-enabled."""

    export_bucket: str | None = Field(default=None, max_length=63)
    export_dir: str | None = Field(default=None, max_length=1000)
    # How long an answered pre-signed URL stays valid (S3 allows up to 7 days).
    export_url_seconds: int = Field(default=3600, ge=60, le=7 * 24 * 3600)


class ExpirySettings(DatabaseSettings):
    """Expiry the deployment asks for (domain/expiry.py): the retention job removes what expired as
    versions (source `retention`); the prompt leaves it out meanwhile. 0: kept for ever."""

    expire_events_after_days: int = Field(default=0, ge=0, le=36_500)
    expire_todos_after_days: int = Field(default=0, ge=0, le=36_500)

    def expiry(self) -> ExpiryPolicy:
        return ExpiryPolicy.from_days(self.expire_events_after_days, self.expire_todos_after_days)


class ConversationTriggerSettings(DatabaseSettings):
    """The conversation-memory trigger (the fan-out's schedule, the operators' API route, the CLI):
    which conversations are quiet, and how many go in one GENERATE_MEMORY_BATCH message."""

    # A conversation whose last message is older than this is quiet: its memory is (re)generated.
    inactivity_threshold_minutes: int = Field(
        default=DEFAULT_INACTIVITY_THRESHOLD_MINUTES, ge=1, le=MAX_INACTIVITY_THRESHOLD_MINUTES
    )
    # Conversations per message: each is one or more LLM calls of a few seconds, and the worker
    # takes WorkerBatchSize messages an invocation within its 105 s budget (what it cannot start
    # in time it re-sends), so the default keeps a typical message inside one invocation. A
    # message also stays within SQS's 256 KiB whatever the ids (measured when the batch is built).
    conversations_per_message: int = Field(default=10, ge=1, le=MAX_CONVERSATIONS_PER_MESSAGE)
    conversation_page_size: int = Field(default=1000, ge=1, le=10_000)


class FanoutSettings(ConversationTriggerSettings):
    """The fan-out function: which users, in what window, to which queue (and, on its
    conversation-memory schedule, the trigger's settings)."""

    queue_url: str = Field(min_length=1)
    users_per_message: int = Field(default=1, ge=1, le=MAX_USERS_PER_MESSAGE)
    fanout_page_size: int = Field(default=1000, ge=1, le=10_000)
    window_hours: int = Field(default=24, ge=1, le=24 * 31)
    # The worker's throughput (domain/plan.py: users_per_second) from the worker's own parameters,
    # and how long the queue keeps a message: the fan-out refuses a day whose backlog would not
    # drain before the retention less a day (FanoutRefused), rather than let SQS drop messages.
    worker_maximum_concurrency: int = Field(default=6, ge=MIN_WORKER_CONCURRENCY, le=MAX_WORKER_CONCURRENCY)
    worker_batch_size: int = Field(default=10, ge=1, le=MAX_BATCH_SIZE)
    llm_concurrency: int = Field(default=DEFAULT_LLM_CONCURRENCY, ge=1, le=MAX_LLM_CONCURRENCY)
    llm_seconds_per_call: float = Field(default=LLM_SECONDS_PER_CALL, gt=0, le=MAX_LLM_SECONDS)
    queue_retention_seconds: int = Field(default=QUEUE_RETENTION_SECONDS, ge=60, le=QUEUE_RETENTION_SECONDS)

    def users_per_second(self) -> float:
        """Users the worker drains a second at its planned concurrency."""
        return users_per_second(
            worker_concurrency=self.worker_maximum_concurrency,
            batch_size=self.worker_batch_size,
            users_per_message=self.users_per_message,
            llm_concurrency=self.llm_concurrency,
            llm_seconds=self.llm_seconds_per_call,
        )


class WorkerSettings(MemorySettings, EmbeddingSettings, ExportSettings):
    """The worker function: the store, the summarizer and the time it may take."""

    summarizer: Literal["auto", "openai", "rules"] = "auto"
    openai_api_key: str | None = Field(default=None, repr=False)
    openai_api_key_secret_name: str | None = None
    openai_api_key_parameter: str | None = None
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"
    openai_temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    openai_timeout_seconds: float = Field(default=25.0, gt=0)
    openai_max_retries: int = Field(default=1, ge=0, le=10)
    summarizer_attempts: int = Field(default=2, ge=1, le=10)
    max_activities_per_run: int = Field(default=500, ge=1, le=10_000)
    max_prompt_activity_chars: int = Field(default=24_000, ge=1_000)
    # edit: the model answers with edits to the document (strict structured output), which are
    # checked, refused one by one where the guardrail says so, and applied; document: the model
    # answers with the whole updated document (the earlier behaviour).
    summary_mode: Literal["edit", "document"] = "edit"
    # Activity lines one prompt carries after identical lines are merged, in tokens estimated as
    # characters / 4; beyond it the oldest lines are left out (forget requests are kept) and the
    # version's provenance counts them. The default matches a full chunk (MAX_PROMPT_ACTIVITY_CHARS / 4).
    max_prompt_activity_tokens: int = Field(default=DEFAULT_MAX_PROMPT_ACTIVITY_TOKENS, ge=100)
    # The model's prices in USD per 1M tokens (prompt, prompt served from the endpoint's cache,
    # completion): each version's provenance records its cost at these (cost_usd). The defaults
    # are the default model's (gpt-4o-mini) list prices; set them with OPENAI_MODEL.
    llm_price_input_per_1m: float = Field(default=0.15, ge=0)
    llm_price_cached_input_per_1m: float = Field(default=0.075, ge=0)
    llm_price_output_per_1m: float = Field(default=0.60, ge=0)
    # A user's LLM tokens per UTC day (0: no limit). A run that would go past it summarizes what
    # fits and defers the rest of the activity to the next run (logged `token budget reached`,
    # counted in TokenBudgetDeferred); never cut silently. At least one full prompt's worth.
    max_tokens_per_user_day: int = Field(default=0, ge=0)

    # Conversation memories (GENERATE_MEMORY_BATCH): the worker's own queue, where conversations
    # that failed are re-sent (without it, a message with failed conversations fails and SQS
    # retries it whole); how often a conversation is re-sent before its message fails instead
    # (then SQS's retries and the DLQ); how long a re-sent message waits; the prompt's size.
    queue_url: str | None = None
    conversation_max_attempts: int = Field(default=5, ge=1, le=50)
    conversation_retry_delay_seconds: int = Field(default=60, ge=0, le=900)
    max_conversation_prompt_chars: int = Field(default=24_000, ge=1_000)
    # Opt-in (0: off): a conversation memory written queues its user's refresh (run key
    # ondemand:<time>) delivered this many seconds later (SQS's DelaySeconds, at most 900), its
    # window ending then, so the memories written meanwhile ride with it: at most one per user per
    # this many seconds (domain/refresh.py). Needs QUEUE_URL.
    refresh_after_conversation_seconds: int = Field(default=0, ge=0, le=900)

    deadline_margin_ms: int = Field(default=15_000, ge=0)
    lambda_timeout_seconds: float = Field(default=120.0, gt=0)
    # Users (and records) one invocation runs at once, each on its own pooled connection, so that
    # a batch takes about one LLM latency rather than one per user (jobs/worker.py).
    llm_concurrency: int = Field(default=DEFAULT_LLM_CONCURRENCY, ge=1, le=MAX_LLM_CONCURRENCY)
    # online: each user's summary is one chat completion in the worker's invocation. batch: the
    # requests of a refresh_user message go to the endpoint's Batch API (half the price at
    # OpenAI, answered within 24 h) and a collect_batch message, re-queued every
    # BATCH_POLL_SECONDS (SQS's DelaySeconds, at most 900) until the batch ends, runs the answers
    # through the same pipeline (jobs/summary_batch.py; needs QUEUE_URL and the OpenAI summarizer).
    summary_delivery: Literal["online", "batch"] = "online"
    batch_poll_seconds: int = Field(default=900, ge=0, le=900)
    # A batch still not ended after this long (the endpoint's window is 24 h) is given up on: its
    # users are summarized online.
    batch_give_up_hours: float = Field(default=26.0, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> WorkerSettings:
        margin = self.deadline_margin_ms / 1000
        if self.summarizer_kind == "openai":
            needed = self.pipeline().call_budget * self.summarizer_attempts + margin
            if needed > self.lambda_timeout_seconds:
                raise ValueError(
                    f"OPENAI_TIMEOUT_SECONDS x (OPENAI_MAX_RETRIES + 1) x SUMMARIZER_ATTEMPTS + DEADLINE_MARGIN_MS "
                    f"= {self.openai_timeout_seconds:g} x {self.openai_max_retries + 1} x {self.summarizer_attempts}"
                    f" + {margin:g} = {needed:g} s does not fit LAMBDA_TIMEOUT_SECONDS "
                    f"({self.lambda_timeout_seconds:g} s)"
                )
        elif margin >= self.lambda_timeout_seconds:
            raise ValueError("DEADLINE_MARGIN_MS must be below LAMBDA_TIMEOUT_SECONDS")
        if self.summarizer == "openai" and not (self._has_key or self.openai_base_url):
            raise ValueError(
                "the OpenAI summarizer needs OPENAI_API_KEY (or its secret or parameter) or OPENAI_BASE_URL"
            )
        if self.summarizer_kind == "openai" and self.document_schema not in ("user_state", "companion"):
            raise ValueError(
                f"the OpenAI summarizer has no instructions for DOCUMENT_SCHEMA={self.document_schema}; "
                "use user_state or companion"
            )
        from user_memory.domain.summary.rules import RULE_SCHEMAS  # the worker's: see the imports above

        if self.summarizer_kind == "rules" and self.document_schema not in RULE_SCHEMAS:
            # It would answer the document unchanged and mark the activity summarized unread.
            raise ValueError(
                f"the rule-based summarizer has no rules for DOCUMENT_SCHEMA={self.document_schema}; "
                f"use {' or '.join(sorted(RULE_SCHEMAS))}"
            )
        if self.summary_delivery == "batch" and (self.summarizer_kind != "openai" or not self.queue_url):
            raise ValueError(
                "SUMMARY_DELIVERY=batch needs the OpenAI summarizer (OPENAI_API_KEY or OPENAI_BASE_URL) and "
                "QUEUE_URL (the collect_batch messages are sent there)"
            )
        if self.refresh_after_conversation_seconds and not self.queue_url:
            raise ValueError("REFRESH_AFTER_CONVERSATION_SECONDS needs QUEUE_URL (the refreshes are sent there)")
        if 0 < self.max_tokens_per_user_day < MIN_TOKENS_PER_USER_DAY:
            raise ValueError(
                f"MAX_TOKENS_PER_USER_DAY must be 0 (no limit) or at least {MIN_TOKENS_PER_USER_DAY:,} (one prompt "
                f"with its document), got {self.max_tokens_per_user_day:,}"
            )
        whole_documents = self.summarizer_kind == "openai" and self.summary_mode == "document"
        if whole_documents and self.document_schema != "user_state":
            raise ValueError("SUMMARY_MODE=document is for DOCUMENT_SCHEMA=user_state; use SUMMARY_MODE=edit")
        return self

    @property
    def _has_key(self) -> bool:
        return bool(self.openai_api_key or self.openai_api_key_secret_name or self.openai_api_key_parameter)

    @property
    def summarizer_kind(self) -> Literal["openai", "rules"]:
        """The summarizer to use: `auto` means OpenAI when a key or an endpoint is configured."""
        if self.summarizer != "auto":
            return self.summarizer
        return "openai" if self._has_key or self.openai_base_url else "rules"

    def memory_config(self) -> MemoryConfig:
        """How conversation memories are generated, from these settings."""
        from user_memory.domain.conversations.batch import MemoryConfig

        return MemoryConfig(
            attempts=self.summarizer_attempts,
            max_messages=self.max_activities_per_run,
            max_prompt_chars=self.max_conversation_prompt_chars,
            call_timeout=self.openai_timeout_seconds,
            call_tries=self.openai_max_retries + 1,
        )

    def pipeline(self) -> PipelineConfig:
        """The run's rules from these settings."""
        from user_memory.domain.summary.pipeline import PipelineConfig

        return PipelineConfig(
            schema=self.document_schema,
            max_document_bytes=self.max_document_bytes,
            attempts=self.summarizer_attempts,
            max_activities=self.max_activities_per_run,
            max_prompt_activity_chars=self.max_prompt_activity_chars,
            call_timeout=self.openai_timeout_seconds,
            call_tries=self.openai_max_retries + 1,
            summary_mode=self.summary_mode,
            prices=Prices(
                input_per_1m=self.llm_price_input_per_1m,
                cached_input_per_1m=self.llm_price_cached_input_per_1m,
                output_per_1m=self.llm_price_output_per_1m,
            ),
            max_tokens_per_user_day=self.max_tokens_per_user_day,
        )


class ApiSettings(MemorySettings, ConversationTriggerSettings, EmbeddingSettings, ExportSettings, ExpirySettings):
    """The HTTP API function: who is an operator, how strict writes are, and the worker queue
    operators trigger conversation memories on (POST /tasks/trigger-memory-generation)."""

    # A token whose `scope` claim holds this scope, or whose groups claim (`cognito:groups`,
    # `groups`) holds it, may use /admin/users/{user_id}/... for any user.
    operator_scope: str = Field(default="user-memory/operator", min_length=1)
    # uuid: the token's `sub` is the user id and must be a UUID (else 401). derived: a `sub` that is
    # not a UUID (Auth0's `auth0|...`, Okta, Entra ID, Google) gets the user id
    # uuid5(SUBJECT_NAMESPACE, iss + "\n" + sub) (user_memory.http.auth); a UUID `sub` stays as it is.
    subject_ids: Literal["uuid", "derived"] = "uuid"
    # true: PATCH, PUT, revert and prune without If-Match answer 428 instead of rebasing.
    require_if_match: bool = False
    # true: GET /me/memory/prompt (and the MCP read_memory tool, `user-memory chat`) also render
    # the fields the schema declares sensitive (companion: date_of_birth, email, phone); off, the
    # prompt never carries them.
    prompt_include_sensitive: bool = False
    database_pool_size: int = Field(default=1, ge=1, le=64)
    # Time kept free before the invocation's deadline: every outbound call of a request (the
    # embeddings after a write, a search's query vector) ends before it (adapters/openai_calls).
    deadline_margin_ms: int = Field(default=1_000, ge=0)
    # The worker queue (the trigger route sends GENERATE_MEMORY_BATCH messages to it); without
    # it the route answers 503.
    queue_url: str | None = None
    # A user's refreshes on demand (POST /me/memory/refresh, the operators' route): at most one
    # queued per user per this many seconds; a request within it answers with the one queued.
    refresh_min_interval_seconds: int = Field(default=300, ge=1, le=86_400)
    # The console (/console) signs in with OpenID Connect (authorization code + PKCE) at this
    # issuer (the JWT authorizer's) as this public client; without them it takes a development
    # token from its URL (`user-memory console`). Other origins the page may call (the issuer's
    # token endpoint when it is elsewhere, e.g. Cognito's hosted UI domain), space-separated.
    console_oidc_issuer: str = Field(default="", max_length=500)
    console_client_id: str = Field(default="", max_length=200)
    console_scopes: str = Field(default="openid", max_length=500)
    console_connect_origins: str = Field(default="", max_length=2000)
    # Where operators' webhook endpoints keep their signing secrets in Secrets Manager (one secret
    # per endpoint, named <prefix><endpoint id>; the function's IAM policy is scoped to the prefix).
    webhook_secret_prefix: str = Field(default="user-memory/webhooks/", min_length=1, max_length=256)


class RetentionSettings(MemorySettings, ExpirySettings):
    """The daily retention job: key-value entries expire by their TTL and by age; events and
    to-dos by the deployment's expiry (written as versions: the memory's schema and limits)."""

    kv_max_age_days: int = Field(default=30, ge=1, le=MAX_AGE_DAYS_LIMIT)
    # A shorter age for some namespaces, as JSON: {"scratch": 1, "chat.session-1": 7}.
    kv_namespace_max_age_days: dict[str, int] = Field(default_factory=dict, max_length=100)

    @field_validator("kv_namespace_max_age_days", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object of namespace: days") from None
        return value

    @model_validator(mode="after")
    def _namespaces_are_namespaces(self) -> Self:
        for namespace, days in self.kv_namespace_max_age_days.items():
            validate_namespace(namespace)
            validate_max_age_days(days)
        return self


class EventsSettings(DatabaseSettings):
    """The events relay: memory-changed events from the outbox to EventBridge and to webhooks."""

    # The EventBridge bus events are put on (the name or ARN); unset: webhooks only.
    event_bus_name: str | None = Field(default=None, max_length=1600)
    # The events' `source` on the bus, what a rule matches on.
    event_source: str = Field(default="user-memory", min_length=1, max_length=256)
    # Every webhook POST ends within this (and within the invocation's time left).
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    # An endpoint's backoff after its n-th failure in a row: base x 2^(n-1), at most the max.
    webhook_retry_base_seconds: int = Field(default=30, ge=1, le=3600)
    webhook_retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    # An endpoint failing for this long without a success is disabled (visible in the list).
    webhook_disable_after_hours: float = Field(default=24.0, gt=0, le=720)
    events_page_size: int = Field(default=500, ge=1, le=5000)
    # Delivered events are deleted once older than this (a disabled endpoint enabled again
    # within it still gets what it missed).
    events_keep_hours: int = Field(default=24, ge=0, le=720)
    # Kept free before the invocation's deadline: no call starts after it.
    deadline_margin_ms: int = Field(default=2_000, ge=0)


class MigrateSettings(DatabaseSettings):
    """The migrate function: the owner's DSN (its DATABASE_SECRET_NAME is the owner's secret, never
    a function login's), and the secrets of the logins `create-logins` makes (JSON with username
    and password, infra/database.yaml). The owner acts as itself: DATABASE_ROLE is not taken."""

    api_login_secret_name: str | None = None
    service_login_secret_name: str | None = None
    # Kept free before the invocation's deadline to answer CloudFormation: the run ends before it
    # (a watchdog cancels its statement), so a stuck lock or a long migration fails with a response.
    deadline_margin_ms: int = Field(default=30_000, ge=0)
