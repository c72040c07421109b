"""Migrations: ordered, recorded with checksums, idempotent, safe from two processes at once."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest
from user_memory.adapters.migrations import load_migrations, migrate, packaged_migrations
from user_memory.errors import MigrationError

MIGRATIONS_DIR = packaged_migrations()

pytestmark = pytest.mark.integration


def test_migrations_apply_once_and_record_checksums(fresh_db):
    names = [m.name for m in load_migrations(MIGRATIONS_DIR)]
    assert migrate(fresh_db) == names
    assert migrate(fresh_db) == []
    with psycopg.connect(fresh_db) as c:
        recorded = c.execute("SELECT name, checksum FROM user_memory_migrations ORDER BY name").fetchall()
    assert [r[0] for r in recorded] == names
    assert all(len(r[1]) == 64 for r in recorded)


def test_two_processes_migrating_at_once_apply_each_migration_once(fresh_db):
    results: list[list[str]] = []
    errors: list[Exception] = []

    def run() -> None:
        try:
            results.append(migrate(fresh_db))
        except Exception as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(len(r) for r in results) == [0, len(load_migrations(MIGRATIONS_DIR))]


def test_changed_migration_is_refused(fresh_db, tmp_path: Path):
    for path in MIGRATIONS_DIR.glob("*.sql"):
        (tmp_path / path.name).write_text(path.read_text())
    migrate(fresh_db, tmp_path)
    first = sorted(tmp_path.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError, match="was changed after it was applied"):
        migrate(fresh_db, tmp_path)


def test_failing_migration_leaves_nothing_half_applied(fresh_db, tmp_path: Path):
    (tmp_path / "001_ok.sql").write_text("CREATE TABLE t_ok (id int);")
    (tmp_path / "002_bad.sql").write_text("CREATE TABLE t_bad (id int); SELECT no_such_function();")
    with pytest.raises(MigrationError, match="002_bad failed"):
        migrate(fresh_db, tmp_path)
    with psycopg.connect(fresh_db) as c:
        assert c.execute("SELECT to_regclass('t_ok') IS NOT NULL, to_regclass('t_bad') IS NULL").fetchone() == (
            True,
            True,
        )
        assert [r[0] for r in c.execute("SELECT name FROM user_memory_migrations")] == ["001_ok"]


# Numbers handed to work that never landed (docs/architecture.md, migrations/). A gap is never
# filled: a migration numbered below one a database has applied would run out of order there.
UNUSED_NUMBERS = {17, 23}


def test_the_migration_numbers_rise_and_the_only_gaps_are_the_ones_explained():
    # Given the packaged migrations' numbers
    numbers = [int(m.name[:3]) for m in load_migrations(MIGRATIONS_DIR)]
    # Then they rise from 001, and the numbers missing below the highest are exactly the unused ones
    assert numbers == sorted(set(numbers)) and numbers[0] == 1
    assert set(range(1, numbers[-1] + 1)) - set(numbers) == UNUSED_NUMBERS
    # And the architecture guide says why each is missing
    guide = (Path(__file__).resolve().parents[2] / "docs/architecture.md").read_text()
    assert all(f"{n:03d} was never used" in guide for n in UNUSED_NUMBERS)


def test_badly_named_migration_is_refused(tmp_path: Path):
    (tmp_path / "1_x.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNN_name.sql"):
        load_migrations(tmp_path)


def test_snapshot_table_matches_the_seed(conn):
    cols = conn.execute(
        """SELECT column_name, data_type, is_nullable FROM information_schema.columns
            WHERE table_name = 'user_memory_snapshots' ORDER BY ordinal_position"""
    ).fetchall()
    assert [c[0] for c in cols] == [
        "user_id", "version", "patch", "is_full_snapshot", "full_snapshot_content",
        "source_description", "created_at", "idempotency_key", "provenance",
    ]  # fmt: skip
    # Provenance (010): JSON, optional (versions written before it, and by other writers, have none)
    assert cols[-1][1:] == ("jsonb", "YES")
    indexes = {r[0]: r[1] for r in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'user_memory_snapshots'"
    )}  # fmt: skip
    assert "WHERE (is_full_snapshot = true)" in indexes["idx_user_memory_snapshots_checkpoints"]
    assert "UNIQUE" in indexes["idx_user_memory_snapshots_user_version"]
    # 015: the seed's random `id` key is gone; (user_id, version) is the primary key
    primary = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'user_memory_snapshots'::regclass AND contype = 'p'"
    ).fetchall()
    assert primary == [("idx_user_memory_snapshots_user_version",)]
    # The seed's (user_id) index is dropped by 007: the unique (user_id, version) index covers it;
    # 015 drops (user_id, created_at): the checkpoints' index carries their times instead.
    assert "idx_user_memory_snapshots_user_created_at" not in indexes
    assert "INCLUDE (created_at)" in indexes["idx_user_memory_snapshots_checkpoints"]
    assert "idx_user_memory_snapshots_user_id" not in indexes
    comment = conn.execute("SELECT obj_description('user_memory_snapshots'::regclass)").fetchone()[0]
    assert "differential snapshots" in comment


def test_the_migrations_folder_comes_from_the_package_not_the_current_directory(tmp_path, monkeypatch):
    # Given a working directory with no migrations in it
    monkeypatch.chdir(tmp_path)
    # Then the packaged folder is still found, and it is the repository's migrations/
    folder = packaged_migrations()
    assert (folder / "001_platform.sql").is_file()
    assert folder.resolve() == (Path(__file__).resolve().parents[2] / "migrations").resolve()


def test_upgrading_marks_activity_the_old_runs_summarized_and_leaves_the_rest(fresh_db, tmp_path):
    # Given a database at 004 where a user had a daily summary written, then an edit by an app,
    # with activity before the summary and after it
    for path in sorted(MIGRATIONS_DIR.glob("00[1-4]_*.sql")):
        (tmp_path / path.name).write_text(path.read_text())
    migrate(fresh_db, tmp_path)
    summarized_user, new_user = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute(
            "SELECT user_memory_append(%s, 0, '[]'::jsonb, false, '{}'::jsonb, 'old run', 'daily:2026-11-20')",
            (summarized_user,),
        )
        c.execute("UPDATE user_memory_snapshots SET created_at = '2026-11-21T00:15:00Z'")
        c.execute(
            "SELECT user_memory_append(%s, 1, '[]'::jsonb, false, '{\"e\": 1}'::jsonb, 'api edit', NULL)",
            (summarized_user,),
        )
        c.execute(
            """INSERT INTO user_activity (user_id, occurred_at, kind, source, external_id, recorded_at) VALUES
               (%(s)s, '2026-11-20T10:00:00Z', 'session', 't', 'before', '2026-11-20T10:00:01Z'),
               (%(s)s, '2026-11-21T10:00:00Z', 'session', 't', 'after', '2026-11-21T10:00:01Z'),
               (%(n)s, '2026-11-20T10:00:00Z', 'session', 't', 'never', '2026-11-20T10:00:01Z')""",
            {"s": summarized_user, "n": new_user},
        )
    # When the rest of the migrations apply
    migrate(fresh_db)
    # Then only the activity before the user's last summary run counts as summarized (the later
    # edit by an app does not make the day's activity summarized)
    with psycopg.connect(fresh_db) as c:
        marks = dict(c.execute("SELECT external_id, summarized_version FROM user_activity").fetchall())
    assert marks == {"before": 1, "after": None, "never": None}


def test_upgrading_to_provenance_keeps_history_and_the_deployments_own_size_limit(fresh_db, tmp_path):
    # Given a database at 009 with one version, whose owner raised the append's size limit in
    # user_memory_settings (as migration 006 tells a deployment to)
    for path in sorted(MIGRATIONS_DIR.glob("00*.sql")):
        (tmp_path / path.name).write_text(path.read_text())
    migrate(fresh_db, tmp_path)
    user = "33333333-3333-3333-3333-333333333333"
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("SELECT user_memory_append(%s, 0, '[]'::jsonb, false, '{\"a\": 1}'::jsonb, 'old', NULL)", (user,))
        c.execute("UPDATE user_memory_settings SET value = '1048576' WHERE name = 'max_document_bytes'")
    # When 010 and the rest apply
    applied = migrate(fresh_db)
    # Then the old version is there with no provenance, and the new function kept the raised limit
    assert applied[:1] == ["010_provenance"]
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute(
            "SELECT version, provenance FROM user_memory_snapshots WHERE user_id = %s", (user,)
        ).fetchall() == [(1, None)]
        # And a write above the old default is taken, with provenance
        big = {"text": "x" * 600_000}
        row = c.execute(
            "SELECT status FROM user_memory_append(%s, 1, '[]', false, %s, 'new', NULL, NULL, %s)",
            (user, psycopg.types.json.Jsonb(big), psycopg.types.json.Jsonb({"mode": "document"})),
        ).fetchone()
        assert row == ("written",)


def test_a_migration_rewritten_for_managed_postgres_is_accepted_under_its_earlier_checksum(fresh_db):
    # Given a database that recorded 006 under the text it had before it was rewritten for
    # owners without SUPERUSER (what a deployment migrated as a superuser has)
    from user_memory.adapters.migrations import _REWRITTEN

    migrate(fresh_db)
    earlier = sorted(_REWRITTEN["006_append_only_history"])[0]
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("UPDATE user_memory_migrations SET checksum = %s WHERE name = '006_append_only_history'", (earlier,))
        # When the migrations run again
        assert migrate(fresh_db) == []
        # Then the record now holds the file's checksum, and any other change is still refused
        current = {m.name: m.checksum for m in load_migrations(MIGRATIONS_DIR)}["006_append_only_history"]
        assert c.execute(
            "SELECT checksum FROM user_memory_migrations WHERE name = '006_append_only_history'"
        ).fetchone() == (current,)
        c.execute("UPDATE user_memory_migrations SET checksum = 'f00' WHERE name = '006_append_only_history'")
    with pytest.raises(MigrationError, match="006_append_only_history was changed after it was applied"):
        migrate(fresh_db)


def test_an_owner_that_may_not_create_pgvector_migrates_without_vectors_and_says_so(
    fresh_db, cluster_admin_url, capsys
):
    # Given a fresh database with no pgvector (its owner made it; only a superuser creates the
    # extension itself, as the suite's superuser run shows)
    from user_memory.adapters.migrations import vectors_enabled
    from user_memory_local.cli import main

    with psycopg.connect(fresh_db, autocommit=True) as c:
        superuser = c.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
    # When `user-memory migrate` runs
    assert main(["migrate", "--database-url", fresh_db]) == 0
    out = capsys.readouterr().out
    # Then every migration applied; without the extension, search says vectors are off
    assert f"applied {len(load_migrations(MIGRATIONS_DIR))} migration(s)" in out
    if superuser:
        assert vectors_enabled(fresh_db) and "vector search is off" not in out
        return
    assert not vectors_enabled(fresh_db)
    assert "vector search is off: pgvector is not installed" in out
    # And once an administrator creates the extension, migrate adds the table
    if cluster_admin_url is not None:
        dbname = psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]
        with psycopg.connect(psycopg.conninfo.make_conninfo(cluster_admin_url, dbname=dbname), autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
        assert main(["migrate", "--database-url", fresh_db]) == 0
        assert vectors_enabled(fresh_db)


def copy_of_the_release(folder: Path, *, without: str | None = None) -> list[str]:
    """This release's migrations copied into `folder` (less `without`); their names."""
    folder.mkdir(exist_ok=True)
    for path in MIGRATIONS_DIR.glob("*.sql"):
        if path.stem != without:
            (folder / path.name).write_text(path.read_text())
    return sorted(p.stem for p in folder.glob("*.sql"))


def test_an_older_release_accepts_newer_migrations_and_a_newer_text_of_its_own_and_applies_nothing(fresh_db, tmp_path):
    # Given a database a newer release migrated: two migrations this release does not have, and the
    # last of this release's under a text that release rewrote
    newer = tmp_path / "newer"
    names = copy_of_the_release(newer)
    last = int(names[-1][:3])
    (newer / f"{last + 1:03d}_newer_table.sql").write_text("CREATE TABLE newer_table (id int);")
    (newer / f"{last + 2:03d}_newer_column.sql").write_text("ALTER TABLE newer_table ADD COLUMN note text;")
    rewritten = newer / f"{names[-1]}.sql"
    rewritten.write_text(rewritten.read_text() + "\n-- rewritten by the newer release\n")
    migrate(fresh_db, newer)
    # When this (older) release migrates it, as a rollback's custom resource does
    applied = migrate(fresh_db)
    # Then it applies nothing, refuses nothing, and every record stays as the newer release wrote it
    assert applied == []
    with psycopg.connect(fresh_db) as c:
        recorded = dict(c.execute("SELECT name, checksum FROM user_memory_migrations").fetchall())
    assert sorted(recorded) == sorted(p.stem for p in newer.glob("*.sql"))
    assert recorded[names[-1]] == {m.name: m.checksum for m in load_migrations(newer)}[names[-1]]


def test_a_changed_migration_is_still_refused_when_the_database_is_not_ahead(fresh_db, tmp_path):
    # Given a database this release migrated
    folder = tmp_path / "release"
    names = copy_of_the_release(folder)
    migrate(fresh_db, folder)
    # When one of its applied migrations is edited in place, with no newer migration recorded
    edited = folder / f"{names[3]}.sql"
    edited.write_text(edited.read_text() + "\n-- edited\n")
    # Then it is refused: only a database ahead of the release holds texts it does not know
    with pytest.raises(MigrationError, match=f"{names[3]} was changed after it was applied"):
        migrate(fresh_db, folder)


def test_a_migration_missing_below_the_newest_applied_is_refused_not_run_out_of_order(fresh_db, tmp_path):
    # Given a database migrated without one of this release's migrations (merged late, numbered
    # before one that was already applied)
    folder = tmp_path / "without"
    names = copy_of_the_release(folder, without=sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))[-2])
    migrate(fresh_db, folder)
    missing = sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))[-2]
    # When this release migrates it
    with pytest.raises(MigrationError) as refused:
        migrate(fresh_db)
    # Then it names the migration and the newer one applied, and applied nothing
    assert str(refused.value).startswith(f"migration {missing} is not applied but {names[-1]}, numbered after it")
    with psycopg.connect(fresh_db) as c:
        assert [r[0] for r in c.execute("SELECT name FROM user_memory_migrations ORDER BY name")] == names
