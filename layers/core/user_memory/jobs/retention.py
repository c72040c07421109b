"""The daily retention job: purge expired and stale key-value entries, remove the events and
to-dos the deployment's expiry expired (as versions, source `retention`), and keep the search index
in step (users whose index is behind their head are reindexed, vectors no item uses are removed);
log and count the outcome."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from user_memory.domain.companion.items import reindex
from user_memory.domain.expiry import SOURCE_RETENTION, expired, without_expired
from user_memory.domain.model import WriteStatus
from user_memory.domain.ports import IndexUpkeep
from user_memory.domain.refresh import KEEP_ROWS, RefreshUpkeep
from user_memory.errors import describe_failure
from user_memory.observability import logger, metrics
from user_memory.runtime import RetentionServices


def purge_kv(services: RetentionServices | Callable[[], RetentionServices]) -> dict[str, Any]:
    """Delete every key-value entry that has expired, or was not updated for KV_MAX_AGE_DAYS days
    (or its namespace's shorter KV_NAMESPACE_MAX_AGE_DAYS).

    A failure (building the services included) is logged, counted and raised, so the invocation
    fails: EventBridge and Lambda retry it (the purge is idempotent), then the event goes to the
    schedule's dead-letter queue, and the errors alarm fires.
    """
    try:
        if callable(services):
            services = services()
        max_age_days = services.settings.kv_max_age_days
        started = time.perf_counter()
        deleted = services.kv.purge(max_age_days=max_age_days)
        by_namespace = {
            namespace: services.kv.purge_namespace(namespace, max_age_days=days)
            for namespace, days in services.settings.kv_namespace_max_age_days.items()
        }
        deleted += sum(by_namespace.values())
        seconds = time.perf_counter() - started
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("retention failed", error_type=error, reason=reason)
        metrics.add_metric(name="RetentionFailed", unit=MetricUnit.Count, value=1)
        raise
    logger.info(
        "kv purged", deleted=deleted, max_age_days=max_age_days, by_namespace=by_namespace,
        seconds=round(seconds, 3),
    )  # fmt: skip
    metrics.add_metric(name="KvEntriesPurged", unit=MetricUnit.Count, value=deleted)
    return {"deleted": deleted, "max_age_days": max_age_days, "by_namespace": by_namespace}


MAX_REINDEX_PER_RUN = 5000


def index_upkeep(index: IndexUpkeep, *, max_users: int = MAX_REINDEX_PER_RUN) -> dict[str, Any]:
    """Reindex up to `max_users` users whose memory_items are behind their head (a deployment's
    first run after migration 012, a writer that sent no item changes) and purge orphaned vectors.
    One user's failure is logged and counted and does not stop the others."""
    reindexed = failed = 0
    started = time.perf_counter()
    for page in index.users_behind():
        for user_id in page:
            if reindexed + failed >= max_users:
                break
            try:
                if reindex(index, user_id):
                    reindexed += 1
            except Exception as err:  # one user's failure must not stop the others
                error, reason = describe_failure(err)
                logger.warning("reindex failed", user_id=str(user_id), error=error, reason=reason)
                failed += 1
        if reindexed + failed >= max_users:
            break
    orphans = index.purge_orphan_embeddings()
    logger.info(
        "index upkeep", reindexed=reindexed, failed=failed, orphan_vectors=orphans,
        seconds=round(time.perf_counter() - started, 3),
    )  # fmt: skip
    metrics.add_metric(name="UsersReindexed", unit=MetricUnit.Count, value=reindexed)
    if failed:
        metrics.add_metric(name="ReindexFailed", unit=MetricUnit.Count, value=failed)
    return {"reindexed": reindexed, "reindex_failed": failed, "orphan_vectors": orphans}


def purge_refreshes(refreshes: RefreshUpkeep, *, now: datetime | None = None) -> int:
    """Remove the refresh rows no claim can be refused by any more (domain/refresh.py: KEEP_ROWS)."""
    purged = refreshes.purge((now or datetime.now(UTC)) - KEEP_ROWS)
    logger.info("refreshes purged", purged=purged)
    return purged


def run_retention(services: RetentionServices | Callable[[], RetentionServices]) -> dict[str, Any]:
    """The scheduled job: the key-value purge, the deployment's expiry, then the index upkeep and the old
    refresh rows."""
    report = purge_kv(services)
    built = services() if callable(services) else services
    try:
        report.update(expire_elements(built))
        report.update(index_upkeep(built.search))
        if built.refreshes is not None:
            report["refreshes_purged"] = purge_refreshes(built.refreshes)
    except Exception as err:
        error, reason = describe_failure(err)
        logger.error("index upkeep failed", error_type=error, reason=reason)
        metrics.add_metric(name="RetentionFailed", unit=MetricUnit.Count, value=1)
        raise
    return report


EXPIRY_PAGE = 500


def expire_elements(services: RetentionServices, now: datetime | None = None) -> dict[str, Any]:
    """Remove what the deployment's expiry expired, one version per user (source `retention`, the
    removed elements in its provenance, the day in its run key: a rerun writes nothing new). One
    user's failure (a concurrent write included: the next run tries again) is logged and counted
    and does not stop the others."""
    policy = services.settings.expiry()
    if not policy.active or services.store is None or services.expiry_candidates is None:
        return {"expired_users": 0, "expired_elements": 0}
    now = now or datetime.now(UTC)
    events_before = now - policy.events_after if policy.events_after is not None else None
    run_key = f"{SOURCE_RETENTION}:{now.date().isoformat()}"
    users = elements = failed = 0
    after = None
    while True:
        page = services.expiry_candidates.users(
            events_ended_before=events_before, todos=policy.todos_after is not None, after=after, limit=EXPIRY_PAGE
        )
        for user_id in page:
            try:
                head = services.store.head(user_id)
                gone = expired(head.document, policy, now)
                if not gone:
                    continue
                result = services.store.append(
                    user_id,
                    without_expired(head.document, policy, now),
                    expected_version=head.version,
                    source=SOURCE_RETENTION,
                    idempotency_key=run_key,
                    provenance={"expired": [{"collection": c, "id": i} for c, i in gone]},
                )
                if result.status == WriteStatus.WRITTEN:
                    users += 1
                    elements += len(gone)
            except Exception as err:  # one user's failure must not stop the others
                error, reason = describe_failure(err)
                logger.warning("expiry failed", user_id=str(user_id), error=error, reason=reason)
                failed += 1
        if len(page) < EXPIRY_PAGE:
            break
        after = page[-1]
    logger.info("elements expired", users=users, elements=elements, failed=failed, run_key=run_key)
    metrics.add_metric(name="ElementsExpired", unit=MetricUnit.Count, value=elements)
    if failed:
        metrics.add_metric(name="ExpiryFailed", unit=MetricUnit.Count, value=failed)
    return {"expired_users": users, "expired_elements": elements, "expiry_failed": failed}
