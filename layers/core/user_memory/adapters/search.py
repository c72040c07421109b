"""Search over a user's memory items: PostgreSQL full text, pgvector when embeddings are on, fused.

Full text is always there (memory_items.tsv over the user's rows): the query's words are ORed, so an item that
has some of them still ranks (ts_rank_cd). With an embedder configured and pgvector installed,
the query is embedded once and the user's items are ranked by cosine distance too, and the two
rankings are fused by reciprocal rank (k = 60). A user's search reads only that user's rows
(row-level security as the end user, and the WHERE clause), and is exact over them: a memory
is at most a few thousand items. The HNSW index serves the operators' search across users
(`search_all`), where filtering by one user is not needed; pgvector 0.8's iterative scans
would let it serve filtered per-user searches as well.

Embeddings are computed only for item texts the user has no vector for (`embed_pending`), so
a version re-embeds exactly the items whose text it changed.

The index's upkeep, for every schema, is here too: the users whose index is behind their head,
what a reindex reads and writes (the rows themselves are the domain's: `items.reindex`), and the
vectors no item uses any more. And the after-write embedding (`embed_after_write`): the texts a
committed write added are embedded outside its transaction (an endpoint's latency never holds a
database transaction open), after an API request (runtime.py), after a worker's user run and by
`user-memory embed`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from psycopg.types.json import Jsonb

from user_memory.adapters.postgres import ConnectionSource, _Database
from user_memory.domain.companion.items import redacted
from user_memory.domain.ports import Embedder, IndexSource, ItemEmbeddings
from user_memory.errors import EmbeddingsUnavailable, InvalidArgument, InvalidRequest

Mode = Literal["auto", "fts", "vector", "fused"]
RRF_K = 60
MAX_K = 100
MAX_QUERY_CHARS = 500
EMBED_BATCH = 128
DIMENSIONS = 256


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    path: str
    version: int
    kind: str
    text: str
    value: Any
    score: float
    matched_by: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    hits: list[SearchHit]
    mode: str  # what ran: fts, vector or fused


@dataclass
class EmbedReport:
    inputs: int = 0  # texts embedded
    calls: int = 0  # requests to the endpoint
    stored: int = 0
    paths: list[str] = field(default_factory=list)


_FTS = """
SELECT i.path, i.version, i.kind, i.text, i.value, ts_rank_cd(i.tsv, q.q) AS rank
  FROM memory_items i,
       (SELECT nullif(regexp_replace(plainto_tsquery('english', %(q)s)::text, ' (&|<->|<[0-9]+>) ', ' | ', 'g'),
                      '')::tsquery AS q) q
 WHERE i.user_id = %(u)s AND i.tsv @@ q.q
 ORDER BY rank DESC, i.path
 LIMIT %(n)s
"""

# Exact over the user's rows: materialized first, so the planner cannot walk the global HNSW
# index and filter by user afterwards (which returns fewer than k rows for most users).
_VECTOR = """
WITH mine AS MATERIALIZED (
  SELECT i.path, i.version, i.kind, i.text, i.value, e.embedding
    FROM memory_items i JOIN memory_embeddings e ON e.user_id = i.user_id AND e.text_md5 = i.text_md5
   WHERE i.user_id = %(u)s AND e.user_id = %(u)s
)
SELECT path, version, kind, text, value, 1 - (embedding <=> %(v)s::vector) AS similarity
  FROM mine ORDER BY embedding <=> %(v)s::vector, path
 LIMIT %(n)s
"""

# The k nearest vectors through the HNSW index, then their items (a text can be several items of
# its user: the first k rows are kept); vectors no item has any more are skipped.
_NEAREST = """
SELECT e.user_id, e.text_md5, e.embedding <=> %(v)s::vector AS distance
  FROM memory_embeddings e
 ORDER BY e.embedding <=> %(v)s::vector
 LIMIT %(n)s
"""

_ALL = f"""
SELECT i.user_id, i.path, i.version, i.kind, i.text, 1 - n.distance AS similarity
  FROM ({_NEAREST}) n
  JOIN memory_items i ON i.user_id = n.user_id AND i.text_md5 = n.text_md5
 ORDER BY n.distance, i.user_id, i.path
 LIMIT %(n)s
"""

_PENDING = """
SELECT DISTINCT ON (i.text_md5) i.text_md5, i.text, i.path FROM memory_items i
 WHERE i.user_id = %s
   AND NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.user_id = i.user_id AND e.text_md5 = i.text_md5)
 ORDER BY i.text_md5, i.path
 LIMIT %s
"""


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"


def check_query(query: str, k: int) -> str:
    """The query's text, stripped; InvalidArgument naming `q` or `k` (the HTTP API's names)."""
    text = (query or "").strip()
    if not text:
        raise InvalidArgument("q", "must not be empty")
    if "\x00" in text:
        raise InvalidArgument("q", "must not contain NUL characters")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgument("q", f"must be at most {MAX_QUERY_CHARS} characters")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidArgument("k", f"must be between 1 and {MAX_K}")
    return text


def fuse(rankings: list[list[SearchHit]], k: int) -> list[SearchHit]:
    """Reciprocal rank fusion: score = sum of 1 / (60 + rank) over the rankings an item is in."""
    scores: dict[str, float] = {}
    first: dict[str, SearchHit] = {}
    matched: dict[str, list[str]] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.path] = scores.get(hit.path, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(hit.path, hit)
            matched.setdefault(hit.path, []).extend(hit.matched_by)
    order = sorted(scores, key=lambda p: (-scores[p], p))[:k]
    return [
        SearchHit(
            path=p,
            version=first[p].version,
            kind=first[p].kind,
            text=first[p].text,
            value=first[p].value,
            score=round(scores[p], 6),
            matched_by=tuple(dict.fromkeys(matched[p])),
        )
        for p in order
    ]


class PostgresSearch(_Database):
    """Search and embedding upkeep over memory_items (and memory_embeddings)."""

    def __init__(
        self, pool: ConnectionSource, embedder: Embedder | None = None, *, vectors: bool | None = None
    ) -> None:
        """`vectors`: whether the vector table exists, when the caller knows (else asked once)."""
        super().__init__(pool)
        self.embedder = embedder
        self._vectors = vectors

    def vectors_available(self) -> bool:
        """An embedder is configured and the database has the memory_embeddings table (pgvector)."""
        if self.embedder is None:
            return False
        if self._vectors is None:
            with self.connection() as conn:
                row = conn.execute("SELECT to_regclass('public.memory_embeddings') IS NOT NULL").fetchone()
            self._vectors = bool(row and row[0])
        return self._vectors

    def search(self, user_id: uuid.UUID, query: str, k: int = 10, mode: Mode = "auto") -> SearchResult:
        """The user's k best items for `query`. auto: fused when vectors are available, else full text."""
        text = check_query(query, k)
        vectors = self.vectors_available()
        if mode in ("vector", "fused") and not vectors:
            raise InvalidRequest("vector search needs an embeddings endpoint (EMBEDDING_MODEL) and pgvector")
        run = ("fused" if vectors else "fts") if mode == "auto" else mode
        depth = max(k * 4, 40) if run == "fused" else k
        rankings = []
        if run in ("fts", "fused"):
            rankings.append(self.full_text(user_id, text, depth))
        if run in ("vector", "fused"):
            try:
                vector = self._embed_query(text)
            except EmbeddingsUnavailable as err:
                if mode != "auto":
                    raise
                # auto: the words still answer; the endpoint's failure is seen, not the caller's
                from user_memory.errors import describe_failure
                from user_memory.observability import logger, metrics

                error, reason = describe_failure(err)
                logger.warning("query embedding failed", user_id=str(user_id), error=error, reason=reason)
                metrics.add_metric(name="EmbeddingsFailed", unit="Count", value=1)
                return SearchResult(hits=rankings[0][:k], mode="fts")
            rankings.append(self.nearest(user_id, vector, depth))
        hits = rankings[0][:k] if len(rankings) == 1 else fuse(rankings, k)
        return SearchResult(hits=hits, mode=run)

    def full_text(self, user_id: uuid.UUID, query: str, n: int) -> list[SearchHit]:
        with self.connection() as conn:
            rows = conn.execute(_FTS, {"q": query, "u": user_id, "n": n}, prepare=True).fetchall()
        return [_hit(r, "fts") for r in rows]

    def nearest(self, user_id: uuid.UUID, vector: list[float], n: int) -> list[SearchHit]:
        with self.connection() as conn:
            rows = conn.execute(_VECTOR, {"u": user_id, "v": vector_literal(vector), "n": n}, prepare=True).fetchall()
        return [_hit(r, "vector") for r in rows]

    def search_all(self, query: str, k: int = 10, *, ef_search: int = 100) -> list[dict[str, Any]]:
        """Operators: the k nearest item texts across every user (the HNSW index), with their paths."""
        text = check_query(query, k)
        if not self.vectors_available():
            raise InvalidRequest("search across users needs an embeddings endpoint (EMBEDDING_MODEL) and pgvector")
        vector = vector_literal(self._embed_query(text))
        with self.connection() as conn, conn.transaction():
            conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}")
            rows = conn.execute(_ALL, {"v": vector, "n": k}).fetchall()
        keys = ("user_id", "path", "version", "kind", "text", "score")
        return [dict(zip(keys, (str(r[0]), *r[1:5], round(float(r[5]), 6)), strict=True)) for r in rows]

    def _embed_query(self, text: str) -> list[float]:
        assert self.embedder is not None
        return self.embedder.embed([text])[0]

    def embed_pending(self, user_id: uuid.UUID, *, limit: int = 4096) -> EmbedReport:
        """Embed the user's item texts that have no vector yet (batched) and store them."""
        report = EmbedReport()
        if not self.vectors_available():
            return report
        assert self.embedder is not None
        with self.connection() as conn:
            pending = conn.execute(_PENDING, (user_id, limit)).fetchall()
        for start in range(0, len(pending), EMBED_BATCH):
            batch = pending[start : start + EMBED_BATCH]
            vectors = self.embedder.embed([r[1] for r in batch])
            report.calls += 1
            report.inputs += len(batch)
            report.paths.extend(r[2] for r in batch)
            rows = [{"text_md5": r[0], "embedding": v} for r, v in zip(batch, vectors, strict=True)]
            with self.connection() as conn:
                stored = conn.execute(
                    "SELECT user_memory_store_embeddings(%s, %s, %s)", (user_id, self.embedder.model, Jsonb(rows))
                ).fetchone()
            report.stored += int(stored[0]) if stored else 0
        return report

    # -- the index's upkeep --------------------------------------------------------------------------

    def users_behind(self, *, page_size: int = 500) -> Iterator[list[uuid.UUID]]:
        """Pages of users whose index does not reflect their head (`items.reindex` them)."""
        after = uuid.UUID(int=0)
        while True:
            with self.connection() as conn:
                rows = conn.execute(
                    """SELECT user_id FROM user_memory_heads WHERE indexed_version <> version AND user_id > %s
                        ORDER BY user_id LIMIT %s""",
                    (after, page_size),
                ).fetchall()
            if not rows:
                return
            yield [r[0] for r in rows]
            after = rows[-1][0]

    def index_source(self, user_id: uuid.UUID) -> IndexSource | None:
        """The user's head and the items its index holds (path -> (version, text)); None without a head."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT version, document FROM user_memory_heads WHERE user_id = %s", (user_id,)
            ).fetchone()
            if row is None:
                return None
            indexed = {
                r[0]: (r[1], r[2])
                for r in conn.execute("SELECT path, version, text FROM memory_items WHERE user_id = %s", (user_id,))
            }
        return IndexSource(version=row[0], document=row[1], indexed=indexed)

    def write_index(self, user_id: uuid.UUID, version: int, rows: list[dict[str, Any]]) -> bool:
        """Replace the user's items with `rows` as of `version` (user_memory_reindex); False when
        the head is no longer at `version`."""
        with self.connection() as conn:
            status = conn.execute("SELECT user_memory_reindex(%s, %s, %s)", (user_id, version, Jsonb(rows))).fetchone()
        return bool(status and status[0] == "reindexed")

    def purge_orphan_embeddings(self) -> int:
        """Vectors no item of their user has the text of any more (the retention run)."""
        with self.connection() as conn:
            table = conn.execute("SELECT to_regclass('public.memory_embeddings')").fetchone()
            if table is None or table[0] is None:
                return 0
            cur = conn.execute(
                """DELETE FROM memory_embeddings e
                    WHERE NOT EXISTS (SELECT 1 FROM memory_items i
                                       WHERE i.user_id = e.user_id AND i.text_md5 = e.text_md5)"""
            )
        return cur.rowcount


def _hit(r: Any, how: str) -> SearchHit:
    # Redacted again on the way out: rows indexed before values were redacted (migration 018
    # cleans them) must not hand an attendee's email to a search either.
    return SearchHit(
        path=r[0], version=r[1], kind=r[2], text=r[3], value=redacted(r[4]), score=round(float(r[5]), 6),
        matched_by=(how,),
    )  # fmt: skip


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
