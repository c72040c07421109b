"""The composition root: adapters composed into the domain once per process (a Lambda cold start).

Never at import time: a handler builds its services on its first invocation, tests and the
local kit build them with what they want instead (a pool, a summarizer, an SQS client).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg_pool import ConnectionPool

from user_memory.adapters.account import PostgresAccount
from user_memory.adapters.companion import PostgresCompanion
from user_memory.adapters.conversations import PostgresConversations
from user_memory.adapters.kv import PostgresKv
from user_memory.adapters.migrations import Login
from user_memory.adapters.overview import PostgresOverview
from user_memory.adapters.postgres import (
    ActingAs,
    ConnectionSource,
    Conninfo,
    HeldConnections,
    PostgresActivity,
    PostgresRecorder,
    login_conninfo,
    open_pool,
    transaction,
)
from user_memory.adapters.refreshes import PostgresRecent, PostgresRefreshes
from user_memory.adapters.runs import PostgresRuns
from user_memory.adapters.search import PostgresSearch, embed_after_write
from user_memory.adapters.sqs import SqsQueueDepth, SqsSender
from user_memory.config import (
    ApiSettings,
    DatabaseSettings,
    EmbeddingSettings,
    EventsSettings,
    ExportSettings,
    FanoutSettings,
    MemorySettings,
    MigrateSettings,
    RetentionSettings,
    WorkerSettings,
)
from user_memory.domain.account import ErasureReceipt, ExportObjects
from user_memory.domain.conversations.ports import ConversationStore, ConversationSummarizer, Sender
from user_memory.domain.kv import KvStore
from user_memory.domain.memory.repository import MemoryStore
from user_memory.domain.model import parse_user_id
from user_memory.domain.ports import (
    ActivityReader,
    ActivityStore,
    Embedder,
    IndexUpkeep,
    ItemEmbeddings,
    QueueDepth,
    QueueSender,
    ServiceSearch,
    Summarizer,
)
from user_memory.errors import ConfigError, NotFound, WrongSchema

if TYPE_CHECKING:  # the domain's services are built by the functions that use them, and imported there
    from user_memory.adapters.exports import ExportJob, PostgresExports
    from user_memory.adapters.imports import ImportJob
    from user_memory.adapters.openai_batch import SummaryBatches
    from user_memory.domain.account import AccountService
    from user_memory.domain.companion.ports import NightlyCompanionData
    from user_memory.domain.companion.service import CompanionService
    from user_memory.domain.events import Relay, WebhookRegistry
    from user_memory.domain.expiry import ExpiryCandidates
    from user_memory.domain.kv import KvService
    from user_memory.domain.overview import OverviewService
    from user_memory.domain.refresh import RefreshClaims, RefreshUpkeep
    from user_memory.domain.search import SearchService
    from user_memory.domain.service import MemoryService
    from user_memory.domain.session import UserSession
    from user_memory.domain.summary.pipeline import PipelineConfig


# How long a secret read stays cached (Powertools Parameters) before it is read again.
SECRET_MAX_AGE = 300


def _secret(name: str | None, parameter: str | None, *, fresh: bool = False) -> str | None:
    """Read a secret with Powertools Parameters (cached SECRET_MAX_AGE; `fresh` reads it anew),
    from Secrets Manager or SSM."""
    if not (name or parameter):
        return None
    from aws_lambda_powertools.utilities import parameters

    if name:
        return str(parameters.get_secret(name, max_age=SECRET_MAX_AGE, force_fetch=fresh))
    return str(parameters.get_parameter(parameter, decrypt=True, max_age=SECRET_MAX_AGE, force_fetch=fresh))  # type: ignore[arg-type]


def database_url(settings: DatabaseSettings, *, fresh: bool = False) -> str:
    """The DSN: DATABASE_URL, else the login's secret on DATABASE_ENDPOINT, else the DSN secret,
    else the SSM parameter; `fresh` reads a secret anew (after an authentication failure)."""
    if settings.database_url:
        return settings.database_url
    if settings.database_login_secret_name and settings.database_endpoint:
        login = read_login_secret(settings.database_login_secret_name, cached=not fresh)
        return login_conninfo(settings.database_endpoint, login.username, login.password.get_secret_value())
    url = _secret(settings.database_secret_name, settings.database_url_parameter, fresh=fresh)
    if not url:
        raise ConfigError(
            "no database: set DATABASE_URL, DATABASE_LOGIN_SECRET_NAME (with DATABASE_ENDPOINT), "
            "DATABASE_SECRET_NAME or DATABASE_URL_PARAMETER"
        )
    return url


def database_conninfo(settings: DatabaseSettings) -> Conninfo:
    """What a pool's connections are opened with: the DSN as `database_url` reads it, for each new
    connection (a secret from the cache), anew after an authentication failure (a rotated password)."""

    def read(*, fresh: bool = False) -> str:
        return database_url(settings, fresh=fresh)

    return read


def build_summarizer(settings: WorkerSettings) -> Summarizer:
    """OpenAI (or a compatible endpoint) when configured, else the rule-based summarizer."""
    if settings.summarizer_kind == "openai":
        from user_memory.adapters.openai_summarizer import OpenAISummarizer  # only when used: cold start

        key = _secret(settings.openai_api_key_secret_name, settings.openai_api_key_parameter)
        return OpenAISummarizer.from_settings(settings, api_key=key)
    from user_memory.domain.summary.rules import RuleBasedSummarizer

    return RuleBasedSummarizer(settings.document_schema)


def build_conversation_summarizer(settings: WorkerSettings) -> ConversationSummarizer:
    """Conversation memories from OpenAI (or a compatible endpoint) when configured, else the
    rule-based conversation summarizer."""
    if settings.summarizer_kind == "openai":
        from user_memory.adapters.openai_conversations import OpenAIConversationSummarizer

        key = _secret(settings.openai_api_key_secret_name, settings.openai_api_key_parameter)
        return OpenAIConversationSummarizer.from_settings(settings, api_key=key)
    from user_memory.domain.conversations.summarizer import RuleBasedConversationSummarizer

    return RuleBasedConversationSummarizer()


def build_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The embeddings endpoint when EMBEDDING_MODEL is set, else None (full-text search only)."""
    if not settings.embedding_model:
        return None
    from user_memory.adapters.openai_embeddings import OpenAIEmbedder  # only when used: cold start

    key = _secret(settings.embedding_api_key_secret_name, None)
    return OpenAIEmbedder.from_settings(settings, api_key=key)


def memory_store(source: ConnectionSource, settings: MemorySettings) -> MemoryStore:
    """The memory store on PostgreSQL (a pool, or one transaction) with the deployment's checkpoint
    interval and document size limit."""
    return MemoryStore(
        PostgresRecorder(source),
        checkpoint_interval=settings.checkpoint_interval,
        max_document_bytes=settings.max_document_bytes,
    )


def _sqs_client(client: Any) -> Any:
    if client is None:
        import boto3

        client = boto3.client("sqs")
    return client


@dataclass(kw_only=True)
class WorkerServices:
    """What the worker needs."""

    settings: WorkerSettings
    store: MemoryStore
    activity: ActivityStore
    companion: NightlyCompanionData
    search: ItemEmbeddings
    summarizer: Summarizer
    pipeline: PipelineConfig
    conversations: ConversationStore
    conversation_summarizer: ConversationSummarizer
    # The worker's own queue, for re-sending conversations that failed (None: not configured).
    sender: Sender | None = None
    # Holds one database connection for a user's run, so that its statements share one checkout.
    hold: Callable[[], AbstractContextManager[None]] = field(default=nullcontext, repr=False)
    pool: ConnectionPool | None = field(default=None, repr=False)
    # Runs at once in an invocation: LLM_CONCURRENCY, at most the pool's connections (each run holds one).
    concurrency: int = 1
    # SUMMARY_DELIVERY=batch: the Batch API's side (jobs/summary_batch.py); None: online.
    batches: SummaryBatches | None = None
    # An operator's undo of a run: its users and their outcomes (adapters/runs.py, migration 025).
    runs: PostgresRuns | None = None
    # The users' last refreshes (REFRESH_AFTER_CONVERSATION_SECONDS), and the time they are asked at
    # (a simulated clock in benchmarks).
    refreshes: RefreshClaims | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)
    # Export jobs (export_user messages): where their lines go, and the database they read.
    exports: ExportObjects | None = field(default=None, repr=False)
    export_db: ConnectionSource | None = field(default=None, repr=False)

    def close(self) -> None:
        """Close the pool this object opened (a given pool belongs to the caller)."""
        if self.pool is not None:
            self.pool.close()


def build_worker(
    settings: WorkerSettings,
    *,
    summarizer: Summarizer | None = None,
    pool: ConnectionPool | None = None,
    conversation_summarizer: ConversationSummarizer | None = None,
    sqs_client: Any = None,
) -> WorkerServices:
    """Compose the worker's services; a given pool stays the caller's to close. The SQS client
    (for re-sending failed conversations to QUEUE_URL) is built here once unless given."""
    summarizer = summarizer or build_summarizer(settings)  # before the pool: a bad key fails first
    conversation_summarizer = conversation_summarizer or build_conversation_summarizer(settings)
    sender = SqsSender(settings.queue_url, _sqs_client(sqs_client)) if settings.queue_url else None
    owned = pool is None
    pool = pool or open_pool(
        database_conninfo(settings), max_size=settings.llm_concurrency, role=settings.database_role
    )
    db = HeldConnections(pool)  # every adapter's statements go through it: a hold covers them all
    return WorkerServices(
        settings=settings,
        store=memory_store(db, settings),
        activity=PostgresActivity(db),
        companion=PostgresCompanion(db),
        search=PostgresSearch(db, build_embedder(settings)),
        summarizer=summarizer,
        pipeline=settings.pipeline(),
        conversations=PostgresConversations(db),
        conversation_summarizer=conversation_summarizer,
        sender=sender,
        hold=db.hold,
        pool=pool if owned else None,
        concurrency=max(1, min(settings.llm_concurrency, getattr(pool, "max_size", 1))),
        batches=build_summary_batches(settings, summarizer, db),
        runs=PostgresRuns(db),
        refreshes=PostgresRefreshes(db),
        exports=build_export_objects(settings),
        export_db=db,
    )


def build_export_objects(settings: ExportSettings, *, s3_client: Any = None) -> ExportObjects | None:
    """Where exports go: EXPORT_BUCKET (S3), else EXPORT_DIR (a folder), else nowhere (None)."""
    from user_memory.adapters.exports import LocalExportObjects, S3ExportObjects

    if settings.export_bucket:
        return S3ExportObjects(settings.export_bucket, s3_client)
    if settings.export_dir:
        return LocalExportObjects(settings.export_dir)
    return None


def build_summary_batches(
    settings: WorkerSettings, summarizer: Summarizer, db: ConnectionSource
) -> SummaryBatches | None:
    """The Batch API's side of the worker when SUMMARY_DELIVERY=batch, on the summarizer's client."""
    if settings.summary_delivery != "batch":
        return None
    from user_memory.adapters.openai_batch import OpenAIBatches, SummaryBatches
    from user_memory.adapters.openai_summarizer import OpenAISummarizer
    from user_memory.adapters.summary_batches import PostgresBatchRequests

    if not isinstance(summarizer, OpenAISummarizer):
        raise ConfigError("SUMMARY_DELIVERY=batch needs the OpenAI summarizer (its requests go into the batch)")
    return SummaryBatches(
        requests=PostgresBatchRequests(db),
        endpoint=OpenAIBatches.of(summarizer),
        online=summarizer,
        poll_seconds=settings.batch_poll_seconds,
        give_up_seconds=settings.batch_give_up_hours * 3600,
    )


@dataclass(kw_only=True)
class FanoutServices:
    """What the fan-out needs."""

    settings: FanoutSettings
    activity: ActivityReader
    sender: QueueSender
    queue: QueueDepth
    conversations: ConversationStore
    pool: ConnectionPool | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def build_fanout(
    settings: FanoutSettings, *, sqs_client: Any = None, pool: ConnectionPool | None = None
) -> FanoutServices:
    """Compose the fan-out's services; the SQS client is built here once unless given."""
    sqs_client = _sqs_client(sqs_client)
    owned = pool is None
    pool = pool or open_pool(database_conninfo(settings), role=settings.database_role)
    return FanoutServices(
        settings=settings,
        activity=PostgresActivity(pool),
        sender=SqsSender(settings.queue_url, sqs_client),
        queue=SqsQueueDepth(settings.queue_url, sqs_client),
        conversations=PostgresConversations(pool),
        pool=pool if owned else None,
    )


class _TxSession:
    """One request's services on its transaction (domain/session.py's UserSession), each built
    with its ports on first use: a key-value request builds no memory store, a read no search."""

    def __init__(self, api: ApiServices, tx: Any, user_id: uuid.UUID, *, operator: str | None) -> None:
        self._api = api
        self._tx = tx
        self.user_id = user_id
        self._operator = operator  # who acts with the service's rights (None: the end user itself)

    @cached_property
    def memory(self) -> MemoryService:
        from user_memory.domain.service import MemoryService  # the API's routes import it first: not deferred

        settings = self._api.settings
        return MemoryService(
            user_id=self.user_id,
            store=memory_store(self._tx, settings),
            recent=PostgresRecent(self._tx),
            schema=settings.document_schema,
            max_document_bytes=settings.max_document_bytes,
            require_if_match=settings.require_if_match,
            expiry=settings.expiry(),
        )

    @cached_property
    def kv(self) -> KvService:
        from user_memory.domain.kv import KvService

        return KvService(self.user_id, PostgresKv(self._tx))

    @cached_property
    def companion(self) -> CompanionService:
        from user_memory.domain.companion.service import CompanionService

        return CompanionService(self.memory, PostgresCompanion(self._tx))

    @cached_property
    def search(self) -> SearchService:
        from user_memory.domain.search import SearchService

        embedder = self._api.embedder
        vectors = self._api.pool_search.vectors_available() if embedder else False
        return SearchService(self.user_id, PostgresSearch(self._tx, embedder, vectors=vectors))

    @cached_property
    def account(self) -> AccountService:
        from user_memory.domain.account import AccountService

        return AccountService(
            user_id=self.user_id,
            store=self.memory.store,
            activity=PostgresActivity(self._tx),
            account=PostgresAccount(self._tx, end_user=self._operator is None),
            conversations=PostgresConversations(self._tx),
            companion=PostgresCompanion(self._tx),
            operator=self._operator,
            exports=self._api.exports,
        )

    @cached_property
    def overview(self) -> OverviewService:
        from user_memory.domain.overview import OverviewService

        return OverviewService(user_id=self.user_id, store=self.memory.store, overview=PostgresOverview(self._tx))

    @property
    def versions_written(self) -> int:
        """New versions the request wrote (their texts need embedding); none when it built no memory."""
        return self.__dict__["memory"].versions_written if "memory" in self.__dict__ else 0


@dataclass(kw_only=True)
class ApiServices:
    """What the API needs: a pool, and a transaction per request (Sessions).

    The pool's connections stay the API's login, which holds nothing: every request's work runs
    in a transaction as the end user (`authenticated`, RLS) or, for operators and the service's
    own work (vectors, the trigger), as `operator_role` (DATABASE_ROLE, transaction-local). A
    code path that forgets to say which reads nothing.
    """

    settings: ApiSettings
    pool: ConnectionPool = field(repr=False)
    owned: bool = False
    sqs_client: Any = field(default=None, repr=False)
    embedder: Embedder | None = field(default=None, repr=False)
    secrets_client: Any = field(default=None, repr=False)
    exports: ExportObjects | None = field(default=None, repr=False)
    _pool_search: ServiceSearch | None = field(default=None, repr=False)
    # The time a refresh is asked at (a simulated clock in benchmarks and tests).
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)

    @contextmanager
    def session(self, user_id: object, *, operator: str | None = None) -> Iterator[UserSession]:
        """One transaction for one request: as the end user (role authenticated, RLS), or with the
        service's rights when an operator acts (the caller logs who). Each feature's service is
        built when the request first uses it."""
        uid = parse_user_id(user_id)
        end_user = None if operator else uid
        with transaction(self.pool, end_user=end_user, role=self.settings.database_role if operator else None) as tx:
            session = _TxSession(self, tx, uid, operator=operator)
            yield session
        if self.embedder is not None and session.versions_written:
            # The write is committed: whatever happens now is logged and counted, never the request's.
            embed_after_write(self.pool_search, uid)

    @property
    def pool_search(self) -> ServiceSearch:
        """Search with the service's rights on the pool, built once: it stores vectors (the
        service's to store, migration 012), serves the operators' search across users, and knows
        once per process whether the database has the vector table."""
        if self._pool_search is None:
            self._pool_search = PostgresSearch(self.as_service, self.embedder)
        return self._pool_search

    @property
    def as_service(self) -> ConnectionSource:
        """The pool with the service's rights, one transaction per checkout (DATABASE_ROLE, taken
        transaction-locally; without it, the login's own)."""
        return ActingAs(self.pool, self.settings.database_role)

    def search_all(self, query: str, k: int) -> list[dict[str, Any]]:
        """Operators: nearest item texts across every user (the route checks the caller)."""
        return self.pool_search.search_all(query, k)

    def start_export(self, user_id: uuid.UUID, requested_by: str) -> tuple[ExportJob, bool]:
        """A new export job for the user (the route checked the caller), and whether it was queued
        for the worker (QUEUE_URL); where there is no queue (the local kit) the route runs it at
        once (jobs/export.py) on `export_stores`."""
        exports, _ = self.export_stores()
        job = exports.create(user_id, requested_by)
        if not self.settings.queue_url:
            return job, False
        if self.sqs_client is None:
            self.sqs_client = _sqs_client(None)
        body = json.dumps({"type": "export_user", "export_id": job.id})
        SqsSender(self.settings.queue_url, self.sqs_client).send([body])
        return job, True

    def export_stores(self) -> tuple[PostgresExports, ExportObjects]:
        """The export jobs (with the service's rights) and where their lines go."""
        from user_memory.adapters.exports import PostgresExports

        if self.exports is None:
            raise WrongSchema("no export store is configured (EXPORT_BUCKET or EXPORT_DIR): nothing can be exported")
        return PostgresExports(self.as_service), self.exports

    def export_job(self, export_id: str, user_id: uuid.UUID | None = None) -> tuple[ExportJob, str | None]:
        """An export job and, once done, a fresh pre-signed URL; `user_id`: only that user's (else NotFound)."""
        from user_memory.adapters.exports import PostgresExports

        if self.exports is None:
            raise WrongSchema("no export store is configured (EXPORT_BUCKET or EXPORT_DIR): nothing can be exported")
        job = PostgresExports(self.as_service).get(export_id)
        if user_id is not None and job.user_id != user_id:
            raise NotFound("no such export")
        url = None
        if job.status == "done" and job.object_key:
            url = self.exports.url(job.object_key, expires_in=self.settings.export_url_seconds)
        return job, url

    def erasure_receipts(
        self, *, limit: int, before: tuple[datetime, str] | None = None, user_id: uuid.UUID | None = None
    ) -> list[ErasureReceipt]:
        """Operators: erasure receipts newest first, with the service's rights (the route checks)."""
        return PostgresAccount(self.as_service).receipts(limit=limit, before=before, user_id=user_id)

    def run_report(self, run_key: str) -> dict[str, Any]:
        """Operators: one run's totals over the versions it wrote (adapters/overview.py), with the
        service's rights (the route checks the caller)."""
        return PostgresOverview(self.as_service).run_report(run_key)

    def list_runs(self, *, limit: int, after: tuple[datetime, str] | None) -> list[dict[str, Any]]:
        """Operators: the runs newest first with their totals (adapters/runs.py), with the service's rights."""
        return PostgresRuns(self.as_service).list_runs(limit=limit, after=after)

    def start_run_revert(self, run_key: str, user_id: uuid.UUID | None, requested_by: str | None) -> dict[str, Any]:
        """Operators: record the undo of a run (every user it touched, or one) and queue it on the
        worker queue (jobs/run_revert.py); started again, it queues what is still pending or failed."""
        from user_memory.domain.messages import RevertRun

        queue = self._worker_queue("a run cannot be undone through it")
        runs = PostgresRuns(self.as_service)
        started = runs.start(run_key, user_id, requested_by)
        body = RevertRun(type="revert_run", revert_id=started["revert_id"]).model_dump_json()
        queue.send([body])
        return runs.status(started["revert_id"])

    def run_revert_status(self, revert_id: uuid.UUID) -> dict[str, Any]:
        """Operators: an undo's report so far (adapters/runs.py)."""
        return PostgresRuns(self.as_service).status(revert_id)

    def _worker_queue(self, why: str) -> SqsSender:
        """The worker queue, its SQS client built on first use; a deployment without one lacks the
        capability (404 not-enabled), which is no outage."""
        if not self.settings.queue_url:
            raise WrongSchema(f"no worker queue is configured (QUEUE_URL): {why}")
        if self.sqs_client is None:
            self.sqs_client = _sqs_client(None)
        return SqsSender(self.settings.queue_url, self.sqs_client)

    def conversation_trigger(self) -> tuple[ConversationStore, Sender]:
        """Operators: the conversations with the service's rights and the queue the conversation-memory
        trigger (jobs/conversations.py, called by the route) sends to."""
        return PostgresConversations(self.as_service), self._worker_queue("nothing can be triggered")

    @property
    def webhooks(self) -> WebhookRegistry:
        """Operators' webhook endpoints with the service's rights, their secrets in Secrets Manager."""
        from user_memory.adapters.events import PostgresEvents, SecretsManagerSecrets
        from user_memory.domain.events import WebhookRegistry

        if self.secrets_client is None:  # one per process, built on first use (a list needs none)
            self.secrets_client = SecretsManagerSecrets()
        elif not isinstance(self.secrets_client, SecretsManagerSecrets):
            self.secrets_client = SecretsManagerSecrets(self.secrets_client)
        return WebhookRegistry(
            store=PostgresEvents(self.as_service),
            secrets=self.secrets_client,
            secret_prefix=self.settings.webhook_secret_prefix,
        )

    def refresh_queue(self) -> tuple[RefreshClaims, Sender]:
        """The per-user refresh claims with the service's rights and the queue a refresh
        (jobs/refresh.py, called by the route) is sent to."""
        return PostgresRefreshes(self.as_service), self._worker_queue("nothing can be refreshed")

    def create_import(self, user_id: uuid.UUID, requested_by: str) -> tuple[ImportJob, str]:
        """Operators: a new import job into the user's (empty) memory and where to upload its file
        (ImportTargetNotEmpty now rather than after the upload; the job checks again)."""
        from user_memory.adapters.exports import PostgresExports, check_empty
        from user_memory.adapters.imports import PostgresImports

        objects = self._export_objects("imported")
        check_empty(PostgresExports(self.as_service), user_id)
        job = PostgresImports(self.as_service).create(user_id, requested_by)
        return job, objects.upload_url(job.object_key, expires_in=self.settings.export_url_seconds)

    def queue_import(self, import_id: str) -> tuple[Any, ImportJob | None]:
        """Operators: the import jobs with the service's rights and the job marked queued now (None:
        it was queued, running or done already, answered as it is; a failed one is queued again).
        The route sends it (jobs/imports.py) to `import_sender()`, or runs it on `import_stores()`."""
        from user_memory.adapters.imports import PostgresImports

        self._export_objects("imported")
        jobs = PostgresImports(self.as_service)
        return jobs, jobs.queue(import_id)

    def import_sender(self) -> Sender | None:
        """The worker queue imports go to (None: none configured; the request runs the import)."""
        return self._worker_queue("") if self.settings.queue_url else None

    def import_stores(self) -> tuple[ConnectionSource, ExportObjects]:
        """What an import run in the request reads and writes: the database and the uploaded file."""
        return self.as_service, self._export_objects("imported")

    def import_job(self, import_id: str) -> tuple[ImportJob, str | None]:
        """Operators: an import job and, while its file may still be uploaded, a fresh upload URL."""
        from user_memory.adapters.imports import PostgresImports

        objects = self._export_objects("imported")
        job = PostgresImports(self.as_service).get(import_id)
        url = None
        if job.status in ("awaiting_upload", "failed"):
            url = objects.upload_url(job.object_key, expires_in=self.settings.export_url_seconds)
        return job, url

    def _export_objects(self, what: str) -> ExportObjects:
        if self.exports is None:
            raise WrongSchema(f"no export store is configured (EXPORT_BUCKET or EXPORT_DIR): nothing can be {what}")
        return self.exports

    def close(self) -> None:
        if self.owned:
            self.pool.close()


def build_api(settings: ApiSettings, *, pool: ConnectionPool | None = None, sqs_client: Any = None) -> ApiServices:
    """Compose the API's services; a given pool stays the caller's to close. The SQS client (for
    the operators' trigger route) is built on first use unless given. The pool takes no role:
    DATABASE_ROLE is taken only inside operators' transactions (ApiServices)."""
    owned = pool is None
    pool = pool or open_pool(database_conninfo(settings), size=settings.database_pool_size)
    return ApiServices(
        settings=settings,
        pool=pool,
        owned=owned,
        sqs_client=sqs_client,
        embedder=build_embedder(settings),
        exports=build_export_objects(settings),
    )


@dataclass(kw_only=True)
class RetentionServices:
    """What the daily retention job needs: the key-value purge, the search index's upkeep, and
    the deployment's expiry (the users it may concern, the store its versions go to)."""

    settings: RetentionSettings
    kv: KvStore
    search: IndexUpkeep
    pool: ConnectionPool | None = field(default=None, repr=False)
    refreshes: RefreshUpkeep | None = None
    store: MemoryStore | None = None
    expiry_candidates: ExpiryCandidates | None = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def build_retention(settings: RetentionSettings, *, pool: ConnectionPool | None = None) -> RetentionServices:
    """Compose the retention job's services; a given pool stays the caller's to close."""
    owned = pool is None
    pool = pool or open_pool(database_conninfo(settings), role=settings.database_role)
    from user_memory.adapters.expiry import PostgresExpiry

    return RetentionServices(
        settings=settings,
        kv=PostgresKv(pool),
        search=PostgresSearch(pool),
        pool=pool if owned else None,
        refreshes=PostgresRefreshes(pool),
        store=memory_store(pool, settings),
        expiry_candidates=PostgresExpiry(pool),
    )


@dataclass(kw_only=True)
class MigrateServices:
    """What the migrate function needs: the owner's DSN, the migrations, the logins' secrets."""

    settings: MigrateSettings
    dsn: str
    migrations: Path
    # Login group (api, service) -> the secret holding that login's credentials.
    login_secrets: dict[str, str]
    read_login: Callable[[str], Login]


def read_login_secret(name: str, *, cached: bool = False) -> Login:
    """A login's credentials from its Secrets Manager secret (JSON: username, password), read anew
    unless `cached` lets a read of the last SECRET_MAX_AGE seconds stand. A read anew refreshes
    the cache, so the connections after it do not present the old password first."""
    from aws_lambda_powertools.utilities import parameters

    text = str(parameters.get_secret(name, max_age=SECRET_MAX_AGE, force_fetch=not cached))
    try:
        return Login.model_validate(json.loads(text))
    except ValueError:  # not JSON, or not a login's fields; the text is a password: never quoted
        raise ConfigError(f"secret {name} is not a login's credentials (JSON with username and password)") from None


def build_migrate(settings: MigrateSettings, *, migrations: Path) -> MigrateServices:
    """Compose the migrate function's services (reads the owner's DSN secret)."""
    groups = (("api", settings.api_login_secret_name), ("service", settings.service_login_secret_name))
    return MigrateServices(
        settings=settings,
        dsn=database_url(settings, fresh=True),
        migrations=migrations,
        login_secrets={group: name for group, name in groups if name},
        read_login=read_login_secret,
    )


@dataclass(kw_only=True)
class EventsServices:
    """What the events relay needs: the outbox on the pool, the bus, the webhooks' sender and secrets."""

    settings: EventsSettings
    relay: Relay
    pool: ConnectionPool | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def build_events(
    settings: EventsSettings,
    *,
    pool: ConnectionPool | None = None,
    events_client: Any = None,
    secrets_client: Any = None,
    clock: Callable[[], datetime] | None = None,
) -> EventsServices:
    """Compose the relay; a given pool stays the caller's to close, the AWS clients are built here
    unless given (each call bounded: the relay's calls end before the invocation's deadline)."""
    import boto3
    from botocore.config import Config

    from user_memory.adapters.events import EventBridgeBus, HttpWebhookSender, PostgresEvents, SecretsManagerSecrets
    from user_memory.domain.events import Relay, RetryPolicy

    bounded = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})
    now = clock or (lambda: datetime.now(UTC))
    owned = pool is None
    pool = pool or open_pool(database_conninfo(settings), role=settings.database_role)
    bus = None
    if settings.event_bus_name:
        bus = EventBridgeBus(
            settings.event_bus_name, settings.event_source, events_client or boto3.client("events", config=bounded)
        )
    relay = Relay(
        outbox=PostgresEvents(pool),
        bus=bus,
        sender=HttpWebhookSender(now),
        secrets=SecretsManagerSecrets(secrets_client, config=bounded),
        policy=RetryPolicy(
            base=timedelta(seconds=settings.webhook_retry_base_seconds),
            cap=timedelta(seconds=settings.webhook_retry_max_seconds),
            disable_after=timedelta(hours=settings.webhook_disable_after_hours),
        ),
        clock=now,
        page_size=settings.events_page_size,
        call_timeout=settings.webhook_timeout_seconds,
        keep_seconds=settings.events_keep_hours * 3600,
    )
    return EventsServices(settings=settings, relay=relay, pool=pool if owned else None)
