"""Export to JSON Lines and import back (jobs/export.py on real PostgreSQL, a local folder as the
object store): every version rebuilds byte-equal under the importer's id, with its provenance,
source, time and idempotency key, the key-value entries, and the companion elements' index."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from user_memory.adapters.exports import LocalExportObjects, PostgresExports
from user_memory.adapters.kv import PostgresKv
from user_memory.adapters.postgres import PostgresRecorder
from user_memory.domain.memory.repository import MemoryStore
from user_memory.errors import ImportTargetNotEmpty, InvalidExport
from user_memory.jobs.export import run_export, run_import

pytestmark = pytest.mark.integration

SNAPSHOT_ROWS = """
SELECT version, patch, is_full_snapshot, full_snapshot_content, source_description, created_at, idempotency_key,
       provenance
  FROM user_memory_snapshots WHERE user_id = %s ORDER BY version
"""


def history_of(conn: Any, user: object) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(SNAPSHOT_ROWS, (user,)).fetchall()]


def export_file(pool: Any, folder: Path, user: object) -> list[bytes]:
    exports = PostgresExports(pool)
    job = exports.create(uuid.UUID(str(user)), "test")
    done = run_export(exports, LocalExportObjects(folder), job.id)
    assert done.status == "done" and done.object_key is not None
    return list(LocalExportObjects(folder).read(done.object_key))


def test_an_export_imports_back_byte_equal_under_the_importers_id(pool, conn, tmp_path):
    # Given a user with a checkpointed history, provenance, keys and entries
    store = MemoryStore(PostgresRecorder(pool), checkpoint_interval=3)
    user, importer = uuid.uuid4(), uuid.uuid4()
    for n in range(1, 8):
        store.append(
            user,
            {"summary": f"v{n}", "n": n, "f": n / 3, "list": list(range(n))},
            expected_version=n - 1,
            source="api" if n % 2 else "daily",
            idempotency_key=f"k{n}" if n % 3 else None,
            provenance={"mode": "edit", "n": n} if n % 2 == 0 else None,
        )
    PostgresKv(pool).put(user, "notes", "a", {"x": 1})
    PostgresKv(pool).put(user, "notes", "b", [1, 2], ttl_seconds=3600)
    # When it is exported and imported by another user
    lines = export_file(pool, tmp_path, user)
    imported = run_import(PostgresExports(pool), importer, lines)
    # Then every row is the exporter's, under the importer's id
    assert imported.versions == 7 and imported.kv == 2
    assert history_of(conn, importer) == history_of(conn, user)
    for v in range(1, 8):
        a, b = store.at(user, v), store.at(importer, v)
        assert json.dumps(a.document) == json.dumps(b.document) and (a.created_at, a.source) == (b.created_at, b.source)
    assert store.head(importer).document == store.head(user).document
    kv = PostgresKv(pool)
    assert [(e.key, e.value, e.expires_at) for e in kv.list(importer, "notes", limit=10).entries] == [
        (e.key, e.value, e.expires_at) for e in kv.list(user, "notes", limit=10).entries
    ]
    # And the search index follows the imported head
    items = conn.execute("SELECT count(*) FROM memory_items WHERE user_id = %s", (importer,)).fetchone()[0]
    assert items == conn.execute("SELECT count(*) FROM memory_items WHERE user_id = %s", (user,)).fetchone()[0]
    # And a second import into the now non-empty memory is refused, writing nothing
    with pytest.raises(ImportTargetNotEmpty):
        run_import(PostgresExports(pool), importer, lines)
    assert len(history_of(conn, importer)) == 7


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda ls: ls[:-1], "truncated"),
        (lambda ls: [ls[0], *ls[2:]], "follows"),
        (lambda ls: ls[1:], "header"),
        (lambda ls: [ls[0], b"{not json\n", *ls[1:]], "not JSON"),
        (lambda ls: [*ls[:-1], ls[-1].replace(b'"versions":3', b'"versions":4')], "counts"),
    ],
    ids=["truncated", "gap", "no-header", "not-json", "end-counts"],
)
def test_a_damaged_export_is_refused_and_writes_nothing(pool, conn, tmp_path, damage, match):
    store = MemoryStore(PostgresRecorder(pool), checkpoint_interval=2)
    user = uuid.uuid4()
    for n in range(1, 4):
        store.append(user, {"summary": f"v{n}"}, expected_version=n - 1, source="api")
    lines = export_file(pool, tmp_path, user)
    importer = uuid.uuid4()
    with pytest.raises(InvalidExport, match=match), pool.connection() as one, one.transaction():
        run_import(PostgresExports(_Held(one)), importer, damage(lines))
    assert history_of(conn, importer) == []


def test_a_checkpoint_that_disagrees_with_its_patches_is_refused(pool, tmp_path):
    store = MemoryStore(PostgresRecorder(pool), checkpoint_interval=2)
    user = uuid.uuid4()
    for n in range(1, 4):
        store.append(user, {"summary": f"v{n}"}, expected_version=n - 1, source="api")
    lines = export_file(pool, tmp_path, user)
    forged = [line.replace(b'"checkpoint":{"summary":"v2"}', b'"checkpoint":{"summary":"forged"}') for line in lines]
    assert forged != lines
    with pytest.raises(InvalidExport, match="checkpoint differs"):
        run_import(PostgresExports(pool), uuid.uuid4(), forged)


class _Held:
    """One connection, already in a transaction, as a connection source (the import runs in it)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def connection(self) -> Any:
        from contextlib import nullcontext

        return nullcontext(self.conn)


# What jsonb stores (domain/storable.py): no U+0000, no lone surrogate; floats exact or not at all.
storable_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(storable_text, inner, max_size=3),
    max_leaves=8,
)
documents = st.dictionaries(st.sampled_from(["summary", "a", "b", "c", "é"]), json_values, min_size=0, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=st.lists(
        st.tuples(documents, st.sampled_from(["api", "daily", "agent:update_memory"]), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    interval=st.integers(2, 5),
)
def test_any_generated_history_round_trips(pool, tmp_path, history, interval):
    # Given a generated history (documents, sources, provenance or not)
    store = MemoryStore(PostgresRecorder(pool), checkpoint_interval=interval)
    user, importer = uuid.uuid4(), uuid.uuid4()
    written = 0
    for n, (document, source, with_provenance) in enumerate(history, 1):
        result = store.append(
            user, document, expected_version=written, source=source, provenance={"n": n} if with_provenance else None
        )
        written = result.version
    # When it is exported and imported
    folder = tmp_path / uuid.uuid4().hex
    run_import(PostgresExports(pool), importer, export_file(pool, folder, user))
    # Then every version reads the same, byte for byte
    with pool.connection() as conn:
        assert history_of(conn, importer) == history_of(conn, user)
    for v in range(1, written + 1):
        assert json.dumps(store.at(importer, v).document) == json.dumps(store.at(user, v).document)


def test_an_erasure_deletes_the_finished_exports_files_and_counts_them(pool, tmp_path):
    from user_memory.adapters.account import PostgresAccount

    store = MemoryStore(PostgresRecorder(pool))
    user = uuid.uuid4()
    store.append(user, {"summary": "x"}, expected_version=0, source="api")
    export_file(pool, tmp_path, user)
    export_file(pool, tmp_path, user)
    files = sorted(p.name for p in (tmp_path / "exports").iterdir())
    assert len(files) == 2
    # When the user is erased through the service (the objects first, then the rows)
    from user_memory.adapters.postgres import PostgresActivity
    from user_memory.domain.account import AccountService

    service = AccountService(
        user_id=user, store=store, activity=PostgresActivity(pool), account=PostgresAccount(pool),
        operator="ops", exports=LocalExportObjects(tmp_path),
    )  # fmt: skip
    receipt = service.erase()
    # Then the files are gone and the receipt counts them and their jobs
    assert list((tmp_path / "exports").iterdir()) == []
    assert receipt.deleted["export_objects"] == 2 and receipt.deleted["user_memory_exports"] == 2
    assert receipt.requested_by == "operator:ops"
