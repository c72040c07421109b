-- Security: history is append-only, every write goes through user_memory_append, and the only
-- way to remove a user's memory is user_memory_erase.
--
-- Who may do what afterwards (tests/integration/test_security.py proves each line):
--   anon           nothing on memory, heads, activity or users; no function.
--   authenticated  SELECT of its own rows (RLS); writes its own memory only through
--                  user_memory_append, under the end-user rules below; auth.uid().
--   service_role   SELECT everything (BYPASSRLS); INSERT of version rows but never UPDATE,
--                  DELETE or TRUNCATE of them; heads and activity as before; user_memory_append,
--                  user_memory_mark_summarized, user_memory_erase; auth.uid().
--   table owner    as the owner, except that UPDATE, DELETE and TRUNCATE of version rows are
--                  refused by a trigger outside user_memory_erase (and the cascade from users).
--
-- Supabase's default privileges grant ALL on new tables and EXECUTE on new functions to anon,
-- authenticated and service_role. Every privilege is therefore revoked explicitly below, not
-- only the ones earlier migrations granted.

-- ---------------------------------------------------------------------------------------------
-- Table privileges
-- ---------------------------------------------------------------------------------------------

REVOKE ALL ON user_memory_snapshots, user_memory_heads, user_activity, users FROM PUBLIC, anon, authenticated;
-- End users read their own rows (RLS below) and write only through user_memory_append.
GRANT SELECT ON user_memory_snapshots, user_memory_heads, user_activity, users TO authenticated;

-- The service appends version rows and never changes or removes one (an erase goes through
-- user_memory_erase). TRIGGER and REFERENCES are nobody's business but the owner's.
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON user_memory_snapshots FROM service_role;
REVOKE TRUNCATE, REFERENCES, TRIGGER ON user_memory_heads, user_activity, users FROM service_role;
-- Heads move only with a version (user_memory_append) and go only with an erase: a head deleted
-- or rewritten by hand would break that user's appends or make it disagree with history.
REVOKE INSERT, UPDATE, DELETE ON user_memory_heads FROM service_role;

DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM PUBLIC, anon, authenticated',
                 pg_get_serial_sequence('public.user_activity', 'id'));
  -- The migrations' bookkeeping table (created by the migration runner before the first
  -- migration) receives the same default privileges; only the owner has any use for it.
  IF to_regclass('public.user_memory_migrations') IS NOT NULL THEN
    REVOKE ALL ON public.user_memory_migrations FROM PUBLIC, anon, authenticated, service_role;
  END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Row-level security
-- ---------------------------------------------------------------------------------------------

-- With no UPDATE or DELETE privilege these policies grant nothing; dropped, a stray GRANT later
-- (Supabase's default privileges, a hand-typed GRANT ALL) still cannot update or delete a row:
-- RLS refuses a command for which no policy exists.
DROP POLICY IF EXISTS "Users can update own memory snapshots" ON user_memory_snapshots;
DROP POLICY IF EXISTS "Users can delete own memory snapshots" ON user_memory_snapshots;
DROP POLICY IF EXISTS "Users can update own memory head" ON user_memory_heads;
DROP POLICY IF EXISTS "Users can delete own memory head" ON user_memory_heads;
-- The INSERT policies are kept for the same reason the other way round: INSERT is no longer
-- granted to end users either, but should it ever be granted again, a user can still only
-- insert rows for themselves. The SELECT policies are what end users' reads rely on.

ALTER TABLE users ENABLE ROW LEVEL SECURITY;
CREATE POLICY "Users can view own user row"
  ON users FOR SELECT
  USING (auth.uid() = id);
-- service_role has BYPASSRLS; the owner (and so the SECURITY DEFINER functions) is not subject
-- to RLS on its own tables.

-- ---------------------------------------------------------------------------------------------
-- Version rows are append-only, even for the owner
-- ---------------------------------------------------------------------------------------------

-- UPDATE, DELETE and TRUNCATE of user_memory_snapshots are refused unless user_memory_erase is
-- erasing that user (it sets user_memory.erase_user_id for its own DELETE and clears it) or the
-- user's row in users is already gone (ON DELETE CASCADE from users: the user and their history
-- go together). This guards against mistakes, not against the owner: the owner can set the
-- setting or disable the trigger, and a future migration that must rewrite history does so
-- explicitly with ALTER TABLE ... DISABLE TRIGGER. Appends only INSERT, so the trigger never
-- runs on the write path. SECURITY DEFINER so that the users lookup is not narrowed by RLS.
CREATE FUNCTION public.user_memory_snapshots_append_only() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF current_setting('user_memory.erase_user_id', true) = OLD.user_id::text THEN
      RETURN OLD;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM public.users u WHERE u.id = OLD.user_id) THEN
      RETURN OLD;
    END IF;
  END IF;
  RAISE EXCEPTION 'user_memory_snapshots is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege',
          HINT = 'Write through user_memory_append; erase a user with user_memory_erase(user_id).';
END
$$;

CREATE TRIGGER user_memory_snapshots_append_only
  BEFORE UPDATE OR DELETE ON user_memory_snapshots
  FOR EACH ROW EXECUTE FUNCTION public.user_memory_snapshots_append_only();
CREATE TRIGGER user_memory_snapshots_no_truncate
  BEFORE TRUNCATE ON user_memory_snapshots
  FOR EACH STATEMENT EXECUTE FUNCTION public.user_memory_snapshots_append_only();

-- ---------------------------------------------------------------------------------------------
-- user_memory_append: SECURITY DEFINER, with end-user rules and argument checks
-- ---------------------------------------------------------------------------------------------

-- The function writes as its owner (no table privileges needed by the caller, RLS does not
-- apply), so it checks the caller itself. The invoking role is current_setting('role') (what
-- SET [LOCAL] ROLE or PostgREST's set_config('role', ...) chose; a SECURITY DEFINER call does
-- not change it), or session_user when no role was set. A caller is trusted (the service) when
-- it can use service_role's privileges or the owner's; every other caller, `authenticated`
-- included, is an end user:
--   * p_user_id must be auth.uid() (no claims, or claims without a usable sub, are refused),
--   * p_key must be NULL or start with 'api:' (run keys such as 'daily:2026-11-21' are the
--     service's: a user claiming one would make that day's summary a no-op),
--   * p_activity_ids must be NULL (only a summary run marks activity as summarized),
-- each refused with SQLSTATE 42501. For every caller: p_document must be a JSON object no
-- larger than the owner's setting max_document_bytes (default 524288) as measured by
-- octet_length(p_document::text), p_patch a JSON array, p_expected >= 0; else SQLSTATE 22023.
-- The size check is a backstop for writers that bypass the service: jsonb's text form has a
-- space after every ':' and ',', so it measures more than the compact JSON the service limits
-- to MAX_DOCUMENT_BYTES (default 256 KiB) first; the default leaves room for that difference.
-- A deployment that raises MAX_DOCUMENT_BYTES raises the database's limit too, as the owner:
--   UPDATE user_memory_settings SET value = '...' WHERE name = 'max_document_bytes';
-- (A table, not a custom setting in the function's SET clause: only a superuser may create a
-- function that sets a custom parameter, and RDS, Aurora and Supabase give nobody one.)
CREATE TABLE public.user_memory_settings (
  name text PRIMARY KEY,
  value text NOT NULL
);
COMMENT ON TABLE public.user_memory_settings IS
  'Limits the database functions enforce, written by the owner only (read by SECURITY DEFINER functions).';
INSERT INTO public.user_memory_settings (name, value) VALUES ('max_document_bytes', '524288');
REVOKE ALL ON public.user_memory_settings FROM PUBLIC, anon, authenticated, service_role;

CREATE OR REPLACE FUNCTION public.user_memory_append(
  p_user_id uuid,
  p_expected integer,
  p_patch jsonb,
  p_checkpoint boolean,
  p_document jsonb,
  p_source text,
  p_key text,
  p_activity_ids bigint[] DEFAULT NULL
) RETURNS TABLE (status text, version integer, created_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  caller text := current_setting('role');
  claimed uuid;
  max_bytes integer;
  document_bytes integer;
  current_version integer;
  recorded integer;
  fresh bigint;
  ts timestamptz := clock_timestamp();
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  IF NOT (pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE')) THEN
    BEGIN
      claimed := auth.uid();
    EXCEPTION WHEN OTHERS THEN  -- a sub that is not a UUID, claims that are not JSON
      claimed := NULL;
    END;
    IF claimed IS NULL OR p_user_id IS DISTINCT FROM claimed THEN
      RAISE EXCEPTION 'user_memory_append: may only write own memory'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_key IS NOT NULL AND left(p_key, 4) <> 'api:' THEN
      RAISE EXCEPTION 'user_memory_append: idempotency key % is reserved for the service', quote_literal(p_key)
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'End users may use NULL or a key that starts with ''api:''.';
    END IF;
    IF p_activity_ids IS NOT NULL THEN
      RAISE EXCEPTION 'user_memory_append: only the service marks activity as summarized'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_source IS NULL OR NOT (left(p_source, 3) = 'api' OR left(p_source, 6) = 'agent:') THEN
      RAISE EXCEPTION 'user_memory_append: an end user''s source must start with ''api'' or ''agent:'''
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- The database cannot check a document against the deployment's schema (the service does,
    -- before it calls this). What it can guarantee: an end user's version never depends on its
    -- patch to be rebuilt, so a patch that does not match its document cannot break history.
    p_checkpoint := true;
  END IF;

  IF p_user_id IS NULL THEN
    RAISE EXCEPTION 'user_memory_append: user id is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_expected IS NULL OR p_expected < 0 THEN
    RAISE EXCEPTION 'user_memory_append: expected version must be 0 or more, got %', coalesce(p_expected::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_checkpoint IS NULL THEN
    RAISE EXCEPTION 'user_memory_append: checkpoint flag is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF jsonb_typeof(p_document) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'user_memory_append: the document must be a JSON object, got %', coalesce(jsonb_typeof(p_document), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF jsonb_typeof(p_patch) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'user_memory_append: the patch must be a JSON array, got %', coalesce(jsonb_typeof(p_patch), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The owner's setting (user_memory_settings, migration 006); a caller's session cannot change it.
  max_bytes := coalesce((SELECT s.value::integer FROM public.user_memory_settings s WHERE s.name = 'max_document_bytes'), 524288);
  document_bytes := octet_length(p_document::text);
  IF document_bytes > max_bytes THEN
    RAISE EXCEPTION 'user_memory_append: document is % bytes, over the limit of %', document_bytes, max_bytes
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  SELECT h.version INTO current_version
    FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  IF p_key IS NOT NULL THEN
    SELECT s.version INTO recorded
      FROM public.user_memory_snapshots s WHERE s.user_id = p_user_id AND s.idempotency_key = p_key;
    IF recorded IS NOT NULL THEN
      RETURN QUERY SELECT 'idempotent'::text, recorded, NULL::timestamptz;
      RETURN;
    END IF;
  END IF;
  IF coalesce(current_version, 0) <> p_expected THEN
    RETURN QUERY SELECT 'conflict'::text, coalesce(current_version, 0), NULL::timestamptz;
    RETURN;
  END IF;
  -- A summary is only written over activity that is still there and still unsummarized:
  -- another run may have summarized some of it meanwhile (a backfill beside the daily run), or
  -- the user may have been erased. Then the input is stale and the caller starts over. The rows
  -- are locked, so an erase waits for this write (and then removes it too).
  IF p_activity_ids IS NOT NULL THEN
    SELECT count(*) INTO fresh FROM (
      SELECT 1 FROM public.user_activity a
       WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL
         FOR UPDATE) locked;
    IF fresh < cardinality(p_activity_ids) THEN
      RETURN QUERY SELECT 'stale'::text, coalesce(current_version, 0), NULL::timestamptz;
      RETURN;
    END IF;
  END IF;
  IF current_version IS NULL THEN
    INSERT INTO public.users (id) VALUES (p_user_id) ON CONFLICT (id) DO NOTHING;
  END IF;
  INSERT INTO public.user_memory_snapshots
    (user_id, version, patch, is_full_snapshot, full_snapshot_content, source_description, idempotency_key, created_at)
  VALUES
    (p_user_id, p_expected + 1, p_patch, p_checkpoint, CASE WHEN p_checkpoint THEN p_document END,
     p_source, p_key, ts);
  INSERT INTO public.user_memory_heads AS h (user_id, version, document, source_description, updated_at)
  VALUES (p_user_id, p_expected + 1, p_document, p_source, ts)
  ON CONFLICT (user_id) DO UPDATE
     SET version = EXCLUDED.version, document = EXCLUDED.document,
         source_description = EXCLUDED.source_description, updated_at = EXCLUDED.updated_at;
  IF p_activity_ids IS NOT NULL THEN
    UPDATE public.user_activity a SET summarized_version = p_expected + 1
     WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL;
  END IF;
  RETURN QUERY SELECT 'written'::text, p_expected + 1, ts;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- user_memory_mark_summarized: SECURITY DEFINER, service only
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION public.user_memory_mark_summarized(
  p_user_id uuid,
  p_version integer,
  p_activity_ids bigint[]
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  marked integer;
BEGIN
  IF p_version IS NULL OR p_version < 0 THEN
    RAISE EXCEPTION 'user_memory_mark_summarized: version must be 0 or more, got %', coalesce(p_version::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE public.user_activity a SET summarized_version = p_version
   WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL;
  GET DIAGNOSTICS marked = ROW_COUNT;
  RETURN marked;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- user_memory_erase: the only way to remove a user's memory (service only)
-- ---------------------------------------------------------------------------------------------

-- Deletes the user's head, version rows and activity in one call (one transaction) and returns
-- one row per relation with the number of rows deleted. The users row stays: it is the
-- platform's identity row, not memory, and other data may reference it; deleting it cascades
-- to heads and version rows anyway.
-- The head row is locked first: an append in progress for this user holds that lock until it
-- commits, and each DELETE below (a new snapshot per statement) then sees its version row, so
-- no version row outlives the erase.
CREATE FUNCTION public.user_memory_erase(p_user_id uuid)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  heads bigint;
  snapshots bigint;
  activity bigint;
BEGIN
  IF p_user_id IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase: user id is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM 1 FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  -- Activity first: a summary in flight holds its activity rows locked, so this waits for it
  -- to commit, and the statements below (each with a new snapshot) then see its version too,
  -- even a first version that had no head row to lock yet.
  DELETE FROM public.user_activity a WHERE a.user_id = p_user_id;
  GET DIAGNOSTICS activity = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', p_user_id::text, true);
  DELETE FROM public.user_memory_snapshots s WHERE s.user_id = p_user_id;
  GET DIAGNOSTICS snapshots = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', '', true);
  DELETE FROM public.user_memory_heads h WHERE h.user_id = p_user_id;
  GET DIAGNOSTICS heads = ROW_COUNT;
  RETURN QUERY VALUES ('user_memory_heads'::text, heads),
                      ('user_memory_snapshots'::text, snapshots),
                      ('user_activity'::text, activity);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Function privileges
-- ---------------------------------------------------------------------------------------------

REVOKE ALL ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[])
  FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[])
  TO authenticated, service_role;

REVOKE ALL ON FUNCTION public.user_memory_mark_summarized(uuid, integer, bigint[]) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_mark_summarized(uuid, integer, bigint[]) TO service_role;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;

-- A trigger function cannot be called directly; no grants so that the audit of executable
-- functions stays exact.
REVOKE ALL ON FUNCTION public.user_memory_snapshots_append_only() FROM PUBLIC, anon, authenticated, service_role;

-- auth.uid(): the RLS policies run it as the querying role, so authenticated needs it;
-- service_role keeps it for queries that call it. anon has no table privileges left, so it no
-- longer needs it, and PUBLIC never should. Only when 001 created it (it is owned by the role
-- running the migrations): on Supabase auth.uid() is the platform's, other schemas' policies
-- (storage, for one) run it as anon, and its grants are not this project's to change.
DO $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'auth' AND p.proname = 'uid' AND p.pronargs = 0
       AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
  ) THEN
    REVOKE ALL ON FUNCTION auth.uid() FROM PUBLIC, anon;
    GRANT EXECUTE ON FUNCTION auth.uid() TO authenticated, service_role;
  END IF;
END
$$;
