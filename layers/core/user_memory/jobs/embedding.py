"""The after-write embedding: the texts a committed write added are embedded outside its
transaction (an endpoint's latency never holds a database transaction open). Used by the API
after a request, by the worker after a user's run and by `user-memory embed`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from user_memory.domain.ports import ItemEmbeddings


def embed_after_write(search: ItemEmbeddings, user_id: Any) -> None:
    """Embed the texts a committed write added. A failure is logged and counted; the texts stay
    pending and the next write, the nightly run or `user-memory embed` embeds them."""
    from user_memory.errors import describe_failure
    from user_memory.observability import logger, metrics

    try:
        report = search.embed_pending(user_id)
    except Exception as err:  # every failure is seen, none fails the write
        error, reason = describe_failure(err)
        logger.warning("embedding failed", user_id=str(user_id), error=error, reason=reason)
        metrics.add_metric(name="EmbeddingsFailed", unit="Count", value=1)
        return
    if report.inputs:
        metrics.add_metric(name="ItemsEmbedded", unit="Count", value=report.inputs)
