-- Key-value memory: short-lived context per user, (user, namespace, key) -> a JSON value with an
-- optional expiry. Not versioned: a put replaces the value. The limits are the domain's
-- (user_memory.domain.kv), repeated here as CHECK constraints for writers that bypass the
-- service (end users write their own rows directly, under RLS).
--
-- Who may do what (tests/integration/test_kv_security.py proves each line):
--   anon           nothing.
--   authenticated  SELECT, INSERT, UPDATE, DELETE of its own rows only (RLS: auth.uid() = user_id);
--                  created_at and updated_at of its writes are stamped by the database.
--   service_role   SELECT, INSERT, UPDATE, DELETE of every row (BYPASSRLS); user_memory_kv_purge.
--   PUBLIC         nothing.
-- user_memory_erase (service only) now removes a user's entries too.

CREATE TABLE user_memory_kv (
  user_id uuid NOT NULL,
  -- "C": the primary key's order and key comparisons are code point order, what the service's
  -- keyset pages (and Python's str ordering) use.
  namespace text COLLATE "C" NOT NULL DEFAULT 'default',
  key text COLLATE "C" NOT NULL,
  value jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NULL,
  CONSTRAINT user_memory_kv_pkey PRIMARY KEY (user_id, namespace, key),
  -- 1 to 64 characters: a-z, 0-9, '_', '.', '-', starting with a letter or a digit.
  CONSTRAINT user_memory_kv_namespace_check CHECK (namespace ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
  -- 1 to 256 characters, no control characters (Unicode Cc: U+0001-U+001F, U+007F-U+009F;
  -- text cannot hold U+0000 at all).
  CONSTRAINT user_memory_kv_key_check
    CHECK (char_length(key) BETWEEN 1 AND 256 AND key !~ E'[\\x01-\\x1f\\x7f-\\x9f]'),
  -- The service limits a value to 10,240 bytes of compact JSON with its numbers written out in
  -- full. jsonb's text form adds a space after every ',' and ':', so such a value is at most
  -- 15,360 bytes here; 16,384 is the backstop for direct writers.
  CONSTRAINT user_memory_kv_value_size_check CHECK (octet_length(value::text) <= 16384),
  -- A time to live of 1 second to 365 days from the row's last write, or none.
  CONSTRAINT user_memory_kv_expiry_check
    CHECK (expires_at IS NULL
           OR (expires_at > updated_at AND expires_at - updated_at <= interval '31536000 seconds'))
);
-- No foreign key to users: an end user may keep context before it has a users row (it cannot
-- create one), and user_memory_erase removes the entries explicitly.

-- The purge: expired rows (through this partial index) and rows not updated for a while.
CREATE INDEX idx_user_memory_kv_expires_at ON user_memory_kv (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idx_user_memory_kv_updated_at ON user_memory_kv (updated_at);

COMMENT ON TABLE user_memory_kv IS 'Key-value memory: short-lived context per user and namespace; not versioned, purged by user_memory_kv_purge.';
COMMENT ON COLUMN user_memory_kv.namespace IS 'Groups a user''s keys; ^[a-z0-9][a-z0-9_.-]{0,63}$, default ''default''.';
COMMENT ON COLUMN user_memory_kv.key IS '1 to 256 characters, no control characters; unique per user and namespace.';
COMMENT ON COLUMN user_memory_kv.value IS 'Any JSON value, at most 10,240 bytes of compact JSON (checked by the service; 16,384 bytes of jsonb text here).';
COMMENT ON COLUMN user_memory_kv.created_at IS 'First write of the entry; kept when the value is replaced (unless the entry had expired).';
COMMENT ON COLUMN user_memory_kv.updated_at IS 'Last write of the entry; the purge removes entries not updated for its max age.';
COMMENT ON COLUMN user_memory_kv.expires_at IS 'NULL: no expiry. At or after this time the entry is never returned and the purge removes it.';

-- ---------------------------------------------------------------------------------------------
-- Privileges and row-level security
-- ---------------------------------------------------------------------------------------------

-- Supabase's default privileges grant ALL on new tables to anon, authenticated and service_role:
-- revoke everything, then grant exactly what each role needs.
REVOKE ALL ON user_memory_kv FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_memory_kv TO authenticated;
-- Every row, for the service (BYPASSRLS). TRUNCATE, REFERENCES and TRIGGER stay the owner's, as
-- for the other tables (migration 006): entries leave through deletes, the purge or the erase.
GRANT SELECT, INSERT, UPDATE, DELETE ON user_memory_kv TO service_role;

ALTER TABLE user_memory_kv ENABLE ROW LEVEL SECURITY;

CREATE POLICY "Users can view own kv entries"
  ON user_memory_kv FOR SELECT
  USING (auth.uid() = user_id);

CREATE POLICY "Users can insert own kv entries"
  ON user_memory_kv FOR INSERT
  WITH CHECK (auth.uid() = user_id);

CREATE POLICY "Users can update own kv entries"
  ON user_memory_kv FOR UPDATE
  USING (auth.uid() = user_id)
  WITH CHECK (auth.uid() = user_id);

CREATE POLICY "Users can delete own kv entries"
  ON user_memory_kv FOR DELETE
  USING (auth.uid() = user_id);

-- ---------------------------------------------------------------------------------------------
-- End users' writes are stamped with the database's time
-- ---------------------------------------------------------------------------------------------

-- The service passes its own clock (so tests and replays control expiry). An end user writing
-- directly could otherwise set updated_at in the future and keep stale entries from the purge,
-- or rewrite created_at: for every writer that is not the service (cannot use service_role's
-- privileges, nor the table owner's), created_at is now() on insert and kept on update, and updated_at is now(). The
-- expiry check then bounds an end user's expires_at from the database's time. Not SECURITY
-- DEFINER: it only looks at the writing role and changes the row being written.
CREATE FUNCTION public.user_memory_kv_stamp() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  IF pg_has_role(current_user, 'service_role', 'USAGE')
     OR pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' THEN
    NEW.created_at := now();
  ELSE
    NEW.created_at := OLD.created_at;
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

CREATE TRIGGER user_memory_kv_stamp
  BEFORE INSERT OR UPDATE ON user_memory_kv
  FOR EACH ROW EXECUTE FUNCTION public.user_memory_kv_stamp();

-- A trigger function cannot be called directly; no grants, so the audit of executable functions
-- stays exact.
REVOKE ALL ON FUNCTION public.user_memory_kv_stamp() FROM PUBLIC, anon, authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_kv_purge: the retention job (service only)
-- ---------------------------------------------------------------------------------------------

-- Deletes, for every user, the entries that expired at or before p_now and the entries not
-- updated for p_max_age_days days or more (updated_at at or before p_now - p_max_age_days);
-- returns the number of rows deleted. p_now defaults to the transaction's time; the service
-- passes its own clock's reading (user_memory.adapters.kv.PostgresKv.purge).
CREATE FUNCTION public.user_memory_kv_purge(p_max_age_days integer, p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  purged bigint;
BEGIN
  IF p_max_age_days IS NULL OR p_max_age_days < 1 OR p_max_age_days > 36500 THEN
    RAISE EXCEPTION 'user_memory_kv_purge: max age must be 1 to 36500 days, got %', coalesce(p_max_age_days::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_now IS NULL THEN
    RAISE EXCEPTION 'user_memory_kv_purge: now is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM public.user_memory_kv kv
   WHERE kv.expires_at <= p_now
      OR kv.updated_at <= p_now - make_interval(days => p_max_age_days);
  GET DIAGNOSTICS purged = ROW_COUNT;
  RETURN purged;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_kv_purge(integer, timestamptz) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_kv_purge(integer, timestamptz) TO service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_erase: also the user's key-value entries
-- ---------------------------------------------------------------------------------------------

-- Migration 006's function (same signature, same body, same order: activity, then version rows
-- under the erase setting, then the head), then the user's key-value entries, reported as one
-- more row ('user_memory_kv', n). CREATE OR REPLACE keeps its owner and grants; they are
-- restated below all the same.
CREATE OR REPLACE FUNCTION public.user_memory_erase(p_user_id uuid)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  heads bigint;
  snapshots bigint;
  activity bigint;
  kv_entries bigint;
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
  -- Key-value entries, expired or not.
  DELETE FROM public.user_memory_kv kv WHERE kv.user_id = p_user_id;
  GET DIAGNOSTICS kv_entries = ROW_COUNT;
  RETURN QUERY VALUES ('user_memory_heads'::text, heads),
                      ('user_memory_snapshots'::text, snapshots),
                      ('user_activity'::text, activity),
                      ('user_memory_kv'::text, kv_entries);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;
