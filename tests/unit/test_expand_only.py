"""Migrations are expand-only for one release: the ones added since the previous release
(.ci/previous-release) drop, rename, retype or revoke nothing the previous release's code may use
(tests/expand_only.py says what counts; tests/e2e/test_previous_release.py runs that code on the new schema)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from user_memory.adapters.migrations import load_migrations, packaged_migrations

from tests import previous_release
from tests.expand_only import contractions


def test_the_migrations_added_since_the_previous_release_only_expand():
    # Given the migrations this checkout has and the previous release had not
    sha = previous_release.require()
    before = previous_release.migration_names(sha)
    added = [m for m in load_migrations(packaged_migrations()) if m.name not in before]
    # Then none of them contracts the schema (or says, next to the statement, why it may)
    found = {m.name: contractions(m.sql) for m in added}
    assert {name: what for name, what in found.items() if what} == {}


def test_the_previous_releases_migrations_are_all_still_here():
    # Given the previous release's migrations
    before = previous_release.migration_names(previous_release.require())
    # Then this checkout has every one of them (a migration is never removed or renamed)
    assert before <= {m.name for m in load_migrations(packaged_migrations())}


def test_the_check_finds_the_contractions_the_history_has():
    # Given migrations released long ago that removed what older code used
    texts = {m.name: m.sql for m in load_migrations(packaged_migrations())}
    # Then the check names them: 015 dropped the snapshots' id column and its key, 005 a unique constraint
    assert [c.split(":")[0] for c in contractions(texts["015_append_applies_patch"])] == [
        "drop of user_memory_snapshots_pkey",
        "drop of id",
        "drop of idx_user_memory_snapshots_user_created_at",
    ]
    assert [c.split(":")[0] for c in contractions(texts["005_activity_summaries"])] == [
        "drop of user_activity_source_external_id_key"
    ]


def test_what_a_migration_creates_it_may_drop_and_a_reason_excuses_a_statement():
    text = """
    CREATE FUNCTION public.helper(x jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT x $$;
    REVOKE ALL ON FUNCTION public.helper(jsonb) FROM PUBLIC;
    CREATE FUNCTION pg_temp.scratch() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
    DROP FUNCTION pg_temp.scratch();
    CREATE OR REPLACE FUNCTION public.f() RETURNS void LANGUAGE plpgsql AS $body$
    BEGIN DROP TABLE t; EXECUTE 'ALTER TABLE x RENAME TO y'; END $body$;
    -- contract-ok: the previous release never reads old_notes (it was written only by 099)
    ALTER TABLE notes DROP COLUMN old_notes;
    COMMENT ON TABLE notes IS 'DROP TABLE notes; renamed';
    """
    # Then nothing is found: the dropped function and the revoked one are the migration's own, a
    # function body and a string are not statements of the migration, and the drop says why
    assert contractions(text) == []
    # But a DO block runs its statements with the migration
    assert contractions("DO $$ BEGIN ALTER TABLE notes DROP COLUMN body; END $$;") == [
        "drop of body: begin alter table notes drop column body"
    ]


# Names of the test's own, and words of the grammar, are not generated as names.
RESERVED = {"if", "on", "do", "to", "other_thing", "other_column"}
IDENT = st.text(string.ascii_lowercase + "_", min_size=1, max_size=12).filter(lambda s: s not in RESERVED)
CONTRACTING = [
    "DROP TABLE {a}",
    "DROP TABLE IF EXISTS public.{a}",
    "DROP VIEW {a}",
    "DROP FUNCTION {a}(uuid)",
    'DROP POLICY "{a} policy" ON {b}',
    "DROP INDEX CONCURRENTLY {a}",
    "ALTER TABLE {a} DROP COLUMN {b}",
    "ALTER TABLE {a} DROP COLUMN IF EXISTS {b}",
    "ALTER TABLE {a} DROP CONSTRAINT {b}",
    "ALTER TABLE {a} RENAME TO {b}",
    "ALTER TABLE {a} RENAME COLUMN {b} TO x_{b}",
    "ALTER TABLE {a} ALTER COLUMN {b} TYPE bigint",
    "ALTER TABLE {a} ALTER COLUMN {b} SET DATA TYPE text",
    "ALTER TABLE {a} ALTER COLUMN {b} SET NOT NULL",
    "ALTER FUNCTION {a}(int) RENAME TO {b}",
    "REVOKE SELECT ON {a} FROM authenticated",
    "REVOKE EXECUTE ON FUNCTION public.{a}(uuid) FROM service_role",
    "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM anon",
]
EXPANDING = [
    "CREATE TABLE {a} (id int)",
    "ALTER TABLE {a} ADD COLUMN {b} text",
    "ALTER TABLE {a} ALTER COLUMN {b} DROP NOT NULL",
    "ALTER TABLE {a} ALTER COLUMN {b} SET DEFAULT 0",
    "CREATE INDEX {a} ON {b} (id)",
    "GRANT SELECT ON {a} TO authenticated",
    "CREATE OR REPLACE FUNCTION {a}() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
    "COMMENT ON COLUMN {a}.{b} IS 'drop table {a}'",
    "UPDATE {a} SET {b} = 'renamed'",
]


def _cased(text: str, upper: list[bool]) -> str:
    return "".join(c.upper() if u else c for c, u in zip(text, upper + [False] * len(text), strict=False))


@settings(max_examples=300)
@given(
    template=st.sampled_from(CONTRACTING),
    a=IDENT,
    b=IDENT,
    upper=st.lists(st.booleans(), max_size=60),
    space=st.sampled_from([" ", "\n  ", "\t", " /* why */ "]),
)
def test_a_contracting_statement_is_found_whatever_its_names_case_and_spacing(template, a, b, upper, space):
    # Given a contracting statement among expanding ones, in any case and spacing
    statement = _cased(template.format(a=a, b=b), upper).replace(" ", space)
    text = f"CREATE TABLE other_thing (id int);\n{statement};\nALTER TABLE other_thing ADD COLUMN other_column int;"
    # Then exactly it is found
    assert len(contractions(text)) >= 1
    assert all(finding.split(": ", 1)[1].startswith(statement.split()[0].lower()) for finding in contractions(text))


@settings(max_examples=200)
@given(template=st.sampled_from(EXPANDING), a=IDENT, b=IDENT, upper=st.lists(st.booleans(), max_size=60))
def test_an_expanding_statement_is_never_found(template, a, b, upper):
    # Given a statement that only adds, or changes data
    statement = _cased(template.format(a=a, b=b), upper)
    # Then nothing is found
    assert contractions(statement + ";") == []


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_previous_release_missing_from_the_clone_fails_in_ci_and_is_skipped_elsewhere(
    tmp_path, monkeypatch, ci, outcome
):
    # Given a previous release whose commit this clone does not have (a shallow clone)
    named = tmp_path / "previous-release"
    named.write_text("# a comment\n" + "0" * 40 + "\n")
    monkeypatch.setattr(previous_release, "NAMED_IN", named)
    monkeypatch.setenv("CI", ci)
    # When the checks ask for it
    with pytest.raises(outcome) as missing:
        previous_release.require()
    # Then CI fails (and elsewhere the checks are skipped), saying how to fetch it
    assert str(missing.value).startswith(f"the previous release's commit {'0' * 40} (.ci/previous-release)")
    assert "git fetch --unshallow" in str(missing.value)
