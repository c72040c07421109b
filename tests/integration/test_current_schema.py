"""migrations/schema/current.sql is the live schema the migrations make (scripts/current_schema.py):
a reader finds the current definition of a function, table or grant there, not across migrations."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "migrations/schema/current.sql is not the migrated schema: run `make schema` and commit it"


def _generator() -> ModuleType:
    if "current_schema" not in sys.modules:
        spec = importlib.util.spec_from_file_location("current_schema", ROOT / "scripts" / "current_schema.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["current_schema"] = module
        spec.loader.exec_module(module)
    return sys.modules["current_schema"]


@pytest.fixture
def rds_database(database_url: str, owner_mode: str) -> str:
    """The session's migrated database, when its owner makes the file's schema: the RDS-like owner's
    and the superuser's are the same; the Supabase-like owner's default privileges add grants on
    every object (tests/owners.py), and another server's pg_dump (DATABASE_URL) may write otherwise."""
    if owner_mode not in ("rds", "superuser"):
        pytest.skip(f"the file is the RDS-like owner's schema; this run's owner is {owner_mode}")
    return database_url


def test_the_committed_schema_is_the_schema_the_migrations_make(rds_database: str) -> None:
    # Given the session's database, freshly migrated (tests change rows, never the schema)
    generator = _generator()
    # When its schema is dumped as the script dumps it
    dumped = generator.dump(rds_database)
    # Then the committed file is exactly that
    assert generator.SCHEMA_FILE.read_text() == dumped, REGENERATE


def test_the_file_holds_the_live_definition_of_a_function_redefined_by_several_migrations() -> None:
    # Given user_memory_append, defined in several migrations
    migrations = sorted((ROOT / "migrations").glob("*.sql"))
    defining = [m.name for m in migrations if "FUNCTION public.user_memory_append(" in m.read_text()]
    assert len(defining) > 1
    # When the current schema is read
    text = _generator().SCHEMA_FILE.read_text()
    # Then it defines it once: the live definition, with its grants
    assert text.count("CREATE FUNCTION public.user_memory_append(") == 1
    assert "ON FUNCTION public.user_memory_append(" in text
