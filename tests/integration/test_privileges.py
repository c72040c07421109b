"""The privileges audit: every object of the product's schema, enumerated from pg_catalog, against
what anon, authenticated and PUBLIC are meant to hold.

A new table, sequence, view or function is covered without editing this file: whatever it grants
those roles (on purpose, or through Supabase's default privileges, which grant ALL on every new
table, sequence and function to anon, authenticated and service_role) fails the audit until it is
listed below. Runs under every owner mode of the suite (tests/owners.py).
"""

from __future__ import annotations

import pytest

from tests.owners import SERVICE_POLICY

pytestmark = pytest.mark.integration

END_USER_ROLES = ("PUBLIC", "anon", "authenticated")

# (kind, object, grantee, privileges) for every grant anon, authenticated or PUBLIC holds.
# End users read their own rows (RLS) and write only through the functions granted to them;
# key-value entries are theirs to change (008); anon holds nothing but the schemas' USAGE.
EXPECTED: set[tuple[str, str, str, str]] = {
    ("schema", "public", "PUBLIC", "USAGE"),  # PostgreSQL's own default; it opens no object
    ("schema", "public", "anon", "USAGE"),
    ("schema", "public", "authenticated", "USAGE"),
    ("schema", "auth", "anon", "USAGE"),
    ("schema", "auth", "authenticated", "USAGE"),
    ("function", "auth.uid()", "authenticated", "EXECUTE"),
    ("table", "conversation_memories", "authenticated", "SELECT"),
    ("table", "conversation_messages", "authenticated", "SELECT"),
    ("table", "conversations", "authenticated", "SELECT"),
    ("table", "daily_digests", "authenticated", "SELECT"),
    ("table", "feedback_ratings", "authenticated", "SELECT"),
    ("table", "memory_embeddings", "authenticated", "SELECT"),
    ("table", "memory_items", "authenticated", "SELECT"),
    ("table", "user_activity", "authenticated", "SELECT"),
    ("table", "user_memory_heads", "authenticated", "SELECT"),
    ("table", "user_memory_kv", "authenticated", "DELETE,INSERT,SELECT,UPDATE"),
    ("table", "user_memory_snapshots", "authenticated", "SELECT"),
    ("table", "users", "authenticated", "SELECT"),
    # An end user's own activity: the columns of an activity record, never summarized_version (009)
    ("column", "user_activity.external_id", "authenticated", "INSERT"),
    ("column", "user_activity.kind", "authenticated", "INSERT"),
    ("column", "user_activity.occurred_at", "authenticated", "INSERT"),
    ("column", "user_activity.payload", "authenticated", "INSERT"),
    ("column", "user_activity.source", "authenticated", "INSERT"),
    ("column", "user_activity.user_id", "authenticated", "INSERT"),
    (
        "function",
        "user_memory_append(uuid,integer,jsonb,boolean,jsonb,text,text,bigint[],jsonb,jsonb)",
        "authenticated",
        "EXECUTE",
    ),
    ("function", "user_memory_erase_me()", "authenticated", "EXECUTE"),
    ("function", "user_memory_erase_me_with_receipt(integer)", "authenticated", "EXECUTE"),  # 027
    ("table", "user_memory_exports", "authenticated", "SELECT"),  # their own export jobs (027, RLS)
    ("table", "user_memory_imports", "authenticated", "SELECT"),  # imports into their memory (029, RLS)
    ("function", "user_memory_index_catch_up(uuid)", "authenticated", "EXECUTE"),
    ("function", "user_memory_record_messages(jsonb)", "authenticated", "EXECUTE"),
    (
        "function",
        "user_memory_record_rating(uuid,text,integer,text[],text,timestamp with time zone)",
        "authenticated",
        "EXECUTE",
    ),
}

# Objects only the owner uses: nobody else holds anything on them, service_role included.
OWNER_ONLY = {"user_memory_settings", "user_memory_migrations"}

GRANTS = """
WITH objects AS (
  SELECT 'schema' AS kind, n.nspname::text AS name, coalesce(n.nspacl, acldefault('n'::"char", n.nspowner)) AS acl
    FROM pg_namespace n WHERE n.nspname IN ('public', 'auth')
  UNION ALL
  SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'table' END,
         c.relname::text,
         coalesce(c.relacl, acldefault((CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))
    FROM pg_class c
   WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  UNION ALL
  SELECT 'column', c.relname || '.' || a.attname, a.attacl
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
   WHERE c.relnamespace = 'public'::regnamespace AND a.attacl IS NOT NULL AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'function',
         CASE WHEN p.pronamespace = 'public'::regnamespace THEN '' ELSE p.pronamespace::regnamespace::text || '.' END
           || p.proname || '(' || coalesce((SELECT string_agg(format_type(t, NULL), ',' ORDER BY i)
                                              FROM unnest(p.proargtypes) WITH ORDINALITY AS u(t, i)), '') || ')',
         coalesce(p.proacl, acldefault('f'::"char", p.proowner))
    FROM pg_proc p
   WHERE (p.pronamespace = 'public'::regnamespace
          OR (p.pronamespace = 'auth'::regnamespace AND p.proowner = (SELECT datdba FROM pg_database
                                                                      WHERE datname = current_database())))
     AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
)
SELECT o.kind, o.name, CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END AS grantee,
       string_agg(a.privilege_type, ',' ORDER BY a.privilege_type)
  FROM objects o, aclexplode(o.acl) a
 GROUP BY 1, 2, 3
"""


def grants(conn) -> set[tuple[str, str, str, str]]:
    return {tuple(row) for row in conn.execute(GRANTS).fetchall()}


def test_end_users_and_public_hold_exactly_what_they_are_meant_to(conn):
    # Given every object of the schema and its grants
    held = {g for g in grants(conn) if g[2] in END_USER_ROLES}
    # Then nothing beyond the list is held, and everything on the list is
    assert sorted(held - EXPECTED) == [], "granted but not meant to be"
    assert sorted(EXPECTED - held) == [], "meant to be granted but missing"


def test_no_sequence_is_usable_by_end_users(conn):
    # Supabase's defaults give anon and authenticated USAGE, SELECT, UPDATE on every new sequence:
    # setval on feedback_ratings_id_seq by any signed-in user would break every user's next rating
    sequences = {name for kind, name, _g, _p in grants(conn) if kind == "sequence"}
    assert {"feedback_ratings_id_seq", "user_activity_id_seq"} <= sequences
    for role in ("anon", "authenticated"):
        for sequence in sequences:
            row = conn.execute(
                "SELECT has_sequence_privilege(%s, %s, 'USAGE, SELECT, UPDATE')", (role, f"public.{sequence}")
            ).fetchone()
            assert row == (False,), (role, sequence)


def test_owner_only_objects_are_the_owners_only(conn):
    for kind, name, grantee, privileges in grants(conn):
        if name in OWNER_ONLY:
            owner = conn.execute("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = %s::regclass", (name,))
            assert grantee == owner.fetchone()[0], (kind, name, grantee, privileges)


def test_every_table_has_row_level_security_and_admits_the_service(conn):
    # Given every table of the schema but the owner's own
    rows = conn.execute(
        """SELECT c.relname, c.relrowsecurity,
                  EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %s
                           AND p.polroles = ARRAY['service_role'::regrole::oid] AND p.polcmd = '*')
             FROM pg_class c
            WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')""",
        (SERVICE_POLICY,),
    ).fetchall()
    tables = {name: (rls, admitted) for name, rls, admitted in rows if name not in OWNER_ONLY}
    assert "user_memory_snapshots" in tables and "memory_items" in tables
    # Then each has RLS on and a policy letting service_role reach every row (its privileges still
    # decide what it may do): where service_role has no BYPASSRLS (RDS, Aurora) it needs one
    assert {name for name, (rls, _a) in tables.items() if not rls} == set()
    assert {name for name, (_r, admitted) in tables.items() if not admitted} == set()


def test_no_function_is_executable_by_public(conn):
    public = sorted(name for kind, name, grantee, _p in grants(conn) if kind == "function" and grantee == "PUBLIC")
    assert public == []
