-- What Supabase provides and plain PostgreSQL (or the embedded server) lacks:
-- the users table, the three API roles and auth.uid(). Each is created only where missing.

CREATE TABLE IF NOT EXISTS users (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL DEFAULT now()
);

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'anon') THEN
    CREATE ROLE anon NOLOGIN NOINHERIT;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'authenticated') THEN
    CREATE ROLE authenticated NOLOGIN NOINHERIT;
  END IF;
  -- BYPASSRLS only where the owner may grant it (a superuser, or an owner that has it): RDS's
  -- and Aurora's master user has neither, so there service_role reads and writes under RLS
  -- through policies that admit it (migration 013), with the same result.
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
    IF (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user) THEN
      CREATE ROLE service_role NOLOGIN NOINHERIT BYPASSRLS;
    ELSE
      CREATE ROLE service_role NOLOGIN NOINHERIT;
    END IF;
  END IF;
END
$$;

CREATE SCHEMA IF NOT EXISTS auth;

-- Supabase semantics: the `sub` claim of the request's JWT, from request.jwt.claims
-- (current) or request.jwt.claim.sub (legacy). NULL when no claims are set.
DO $$
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'auth' AND p.proname = 'uid'
  ) THEN
    CREATE FUNCTION auth.uid() RETURNS uuid
      LANGUAGE sql STABLE
      AS $fn$
        SELECT coalesce(
          nullif(current_setting('request.jwt.claim.sub', true), ''),
          nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub'
        )::uuid
      $fn$;
  END IF;
END
$$;

GRANT USAGE ON SCHEMA auth TO anon, authenticated, service_role;
GRANT EXECUTE ON FUNCTION auth.uid() TO anon, authenticated, service_role;
GRANT USAGE ON SCHEMA public TO anon, authenticated, service_role;
