-- A managed PostgreSQL's owner, and least privilege at run time.
--
-- RDS's and Aurora's master user and Supabase's postgres are not superusers: the owner may not
-- create a role with BYPASSRLS (001 then creates service_role without it), set a custom
-- parameter in a function's SET clause (006, 010 and 012 now read user_memory_settings) or
-- create an untrusted extension (012 goes on without pgvector). This migration makes the
-- result the same whoever ran the earlier ones:
--
--   * user_memory_settings, for a database that applied 006 before it was rewritten;
--   * service_role reads and writes every row of every table with row-level security through
--     a policy, whether or not it has BYPASSRLS (user_memory_admit_service_role(), which every
--     later migration that enables RLS calls);
--   * no sequence is usable by PUBLIC, anon or authenticated (Supabase's default privileges
--     grant them USAGE, SELECT and UPDATE: setval on feedback_ratings_id_seq by any signed-in
--     user would break every user's next rating);
--   * no function of this schema is executable by PUBLIC: what anon, authenticated and
--     service_role may call is granted to them by name (tests/integration/test_privileges.py
--     enumerates every object and holds the list);
--   * the group roles the functions log in through (a login role per deployment is created
--     IN ROLE one of them, `user-memory create-login`):
--       user_memory_api      NOINHERIT, may SET ROLE authenticated (every end user's request)
--                            or service_role (operator routes); holds no privilege itself, so
--                            RESET ROLE inside a request lands on a role that can read nothing;
--       user_memory_service  inherits service_role (the worker, fan-out and retention);
--   * user_memory_enable_vectors(): creates the embeddings table once pgvector is installed
--     (`user-memory migrate` calls it every time), for an owner that could not create it.

-- ---------------------------------------------------------------------------------------------
-- Settings (006 before it was rewritten kept the limit in the append function's SET clause)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS public.user_memory_settings (
  name text PRIMARY KEY,
  value text NOT NULL
);
DO $$
DECLARE
  kept text;
BEGIN
  SELECT substr(c, length('user_memory.max_document_bytes=') + 1) INTO kept
    FROM pg_proc p, unnest(p.proconfig) c
   WHERE p.proname = 'user_memory_append' AND p.pronamespace = 'public'::regnamespace
     AND c LIKE 'user_memory.max_document_bytes=%'
   LIMIT 1;
  INSERT INTO public.user_memory_settings (name, value)
  VALUES ('max_document_bytes', coalesce(kept, '524288'))
  ON CONFLICT (name) DO NOTHING;
END
$$;
REVOKE ALL ON public.user_memory_settings FROM PUBLIC, anon, authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- service_role under row-level security
-- ---------------------------------------------------------------------------------------------

CREATE PROCEDURE public.user_memory_admit_service_role()
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  t regclass;
BEGIN
  FOR t IN
    SELECT c.oid::regclass FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND c.relrowsecurity
       AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid
                        AND p.polname = 'Service role has every row')
  LOOP
    -- What service_role may do is still its table privileges; the policy only lets those
    -- privileges reach every row where the role has no BYPASSRLS.
    EXECUTE format('CREATE POLICY "Service role has every row" ON %s FOR ALL TO service_role USING (true) WITH CHECK (true)', t);
  END LOOP;
END
$$;
REVOKE ALL ON PROCEDURE public.user_memory_admit_service_role() FROM PUBLIC, anon, authenticated, service_role;
CALL public.user_memory_admit_service_role();

-- ---------------------------------------------------------------------------------------------
-- Sequences and functions: nothing for PUBLIC, anon or authenticated unless named
-- ---------------------------------------------------------------------------------------------

DO $$
DECLARE
  s regclass;
  f regprocedure;
BEGIN
  FOR s IN SELECT c.oid::regclass FROM pg_class c
            WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S'
  LOOP
    EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM PUBLIC, anon, authenticated', s);
  END LOOP;
  -- PostgreSQL grants EXECUTE on every new function to PUBLIC; the grants to anon,
  -- authenticated and service_role made by name in 004-012 stay.
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'public'::regnamespace
              AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
  LOOP
    EXECUTE format('REVOKE EXECUTE ON ROUTINE %s FROM PUBLIC', f);
  END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The group roles the functions log in through
-- ---------------------------------------------------------------------------------------------

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'user_memory_api') THEN
    CREATE ROLE user_memory_api NOLOGIN NOINHERIT;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'user_memory_service') THEN
    CREATE ROLE user_memory_service NOLOGIN INHERIT;
  END IF;
  -- Granting a role needs its ADMIN option: the owner has it for the roles it created (001),
  -- and Supabase's postgres for its own API roles. Without it an administrator runs these two
  -- lines; the functions cannot take their roles until then.
  BEGIN
    GRANT authenticated, service_role TO user_memory_api;
    GRANT service_role TO user_memory_service;
  EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'the owner may not grant authenticated and service_role; as an administrator run: GRANT authenticated, service_role TO user_memory_api; GRANT service_role TO user_memory_service;';
  END;
END
$$;
COMMENT ON ROLE user_memory_api IS 'user-memory API: log in through a member of this role; it may become authenticated or service_role, and holds nothing itself.';
COMMENT ON ROLE user_memory_service IS 'user-memory worker, fan-out and retention: log in through a member of this role; it has service_role''s rights.';

-- ---------------------------------------------------------------------------------------------
-- Vectors once pgvector is there
-- ---------------------------------------------------------------------------------------------

-- 012's table, index, grants and policy, for a database whose owner could not create the
-- extension then. True when the table exists afterwards.
CREATE FUNCTION public.user_memory_enable_vectors() RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  IF to_regclass('public.memory_embeddings') IS NOT NULL THEN
    RETURN true;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
    RETURN false;
  END IF;
  CREATE TABLE public.memory_embeddings (
    user_id uuid NOT NULL,
    text_md5 text NOT NULL,
    model text NOT NULL,
    embedding vector(256) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT memory_embeddings_pkey PRIMARY KEY (user_id, text_md5)
  );
  CREATE INDEX idx_memory_embeddings_hnsw ON public.memory_embeddings
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
  COMMENT ON TABLE public.memory_embeddings IS
    'One embedding per distinct item text of a user (256 dimensions, cosine); items join on text_md5.';
  REVOKE ALL ON public.memory_embeddings FROM PUBLIC, anon, authenticated, service_role;
  GRANT SELECT ON public.memory_embeddings TO authenticated, service_role;
  GRANT DELETE ON public.memory_embeddings TO service_role;
  ALTER TABLE public.memory_embeddings ENABLE ROW LEVEL SECURITY;
  CREATE POLICY "Users can view own embeddings" ON public.memory_embeddings FOR SELECT USING (auth.uid() = user_id);
  CALL public.user_memory_admit_service_role();
  RETURN true;
END
$$;
REVOKE ALL ON FUNCTION public.user_memory_enable_vectors() FROM PUBLIC, anon, authenticated, service_role;
