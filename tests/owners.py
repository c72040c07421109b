"""The database owner the tests run as: the embedded cluster's superuser, or an owner like the one a
managed PostgreSQL gives you (USER_MEMORY_TEST_OWNER=superuser | rds | supabase; default rds).

- rds: what RDS's and Aurora's master user has: LOGIN, CREATEROLE, CREATEDB; no SUPERUSER, no
  BYPASSRLS. The migrations create the API roles themselves (service_role without BYPASSRLS).
- supabase: the same owner, but the API roles already exist as Supabase creates them (service_role
  with BYPASSRLS, each granted to the owner) and the owner's default privileges grant ALL on new
  tables, sequences and functions to anon, authenticated and service_role before any migration.

In both, pgvector is created by the cluster's superuser before the migrations, as an administrator
does on a managed service (RDS's rds_superuser, Supabase's Extensions page). Each mode has a cluster
of its own: roles are cluster-wide, and the modes disagree on them.
"""

from __future__ import annotations

import os
import time

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

MODES = ("superuser", "rds", "supabase")
OWNER = "user_memory_owner"
API_ROLES = ("anon", "authenticated", "service_role")
# The policy that admits service_role to every row of a table with RLS (migration 013).
SERVICE_POLICY = "Service role has every row"


def mode() -> str:
    """The owner mode of this test run, checked."""
    chosen = os.environ.get("USER_MEMORY_TEST_OWNER", "rds")
    if chosen not in MODES:
        raise SystemExit(f"USER_MEMORY_TEST_OWNER must be one of {', '.join(MODES)}, got {chosen!r}")
    return chosen


def drop_database(conn: psycopg.Connection, name: str, *, attempts: int = 50) -> None:
    """DROP DATABASE IF EXISTS ... WITH (FORCE) on an autocommit connection, waiting out an
    autovacuum worker: it runs as the bootstrap superuser, so a non-superuser owner may not end it
    ("permission denied to terminate process") and the drop is tried again shortly after."""
    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    for attempt in range(attempts):
        try:
            conn.execute(statement)
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)


def create_database(admin_url: str, name: str, owner_mode: str) -> str:
    """Create database `name` (dropped first if left over) for `owner_mode`; return the owner's URL.

    `admin_url` is the cluster superuser's. Migrations have not run yet.
    """
    with psycopg.connect(admin_url, autocommit=True) as conn:
        drop_database(conn, name)
        if owner_mode == "superuser":
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return make_conninfo(admin_url, dbname=name)
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone():
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN CREATEROLE CREATEDB NOSUPERUSER NOBYPASSRLS").format(
                    sql.Identifier(OWNER)
                )
            )
        if owner_mode == "supabase":
            for role, attributes in (("anon", ""), ("authenticated", ""), ("service_role", " BYPASSRLS")):
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOINHERIT" + attributes).format(sql.Identifier(role)))
                # Supabase's postgres may grant them on (its API's authenticator is a member too)
                conn.execute(
                    sql.SQL("GRANT {} TO {} WITH ADMIN OPTION").format(sql.Identifier(role), sql.Identifier(OWNER))
                )
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(OWNER)))
    with psycopg.connect(make_conninfo(admin_url, dbname=name), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    owner_url = make_conninfo(admin_url, dbname=name, user=OWNER)
    if owner_mode == "supabase":
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
                grant = f"GRANT ALL ON {kind} TO anon, authenticated, service_role"
                conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public {grant}")
    return owner_url


def after_migrations(owner_url: str, owner_mode: str) -> None:
    """Let the owner SET ROLE to the API roles the migrations created, as the tests' `as_role` does.

    RDS gives the role that creates a role only its ADMIN option (PostgreSQL 16); Supabase grants
    them to its owner. No INHERIT: the owner gains none of their privileges by this.
    """
    if owner_mode != "rds":
        return
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for role in API_ROLES:
            conn.execute(
                sql.SQL("GRANT {} TO {} WITH INHERIT FALSE, SET TRUE").format(
                    sql.Identifier(role), sql.Identifier(OWNER)
                )
            )
