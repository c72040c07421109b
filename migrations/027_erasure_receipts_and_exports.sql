-- Erasure with a receipt, and the asynchronous exports an erasure must reach.
--
--   user_memory_exports            one row per export job (POST /me/export, the operators' route,
--                                  `user-memory export --async`): who asked, its state, the object
--                                  (S3 key or local file) its JSON Lines were written to. No content.
--   user_memory_erasure_receipts   one row per erasure: when, at whose request, rows deleted per
--                                  relation, and a salted hash of the user id (the salt lives in
--                                  user_memory_settings, which only the owner reads), so an operator
--                                  can answer "was this user erased?" without the table naming anyone.
--   user_memory_erase              same signature and the same rows as migration 014 (the previous
--                                  release reads them); it now also deletes the user's export jobs
--                                  and stores a receipt (requested by 'service').
--   user_memory_erase_me           the same for the calling end user (requested by 'self').
--   user_memory_erase_with_receipt (service) / user_memory_erase_me_with_receipt (end user): the
--                                  erasure answering its receipt; the caller says how many export
--                                  objects it deleted before (they live outside the database).
--   user_memory_user_hash          (service) the receipts' hash of a user id, to find its receipts.
--
-- Expand-only: new tables and functions; the two redefined functions keep their signatures and
-- their answers.

INSERT INTO public.user_memory_settings (name, value)
VALUES ('erasure_receipt_salt', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (name) DO NOTHING;

-- ---------------------------------------------------------------------------------------------
-- Export jobs
-- ---------------------------------------------------------------------------------------------

CREATE TABLE public.user_memory_exports (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  user_id uuid NOT NULL,
  requested_by text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 300),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
  object_key text CHECK (object_key IS NULL OR length(object_key) BETWEEN 1 AND 1024),
  lines bigint CHECK (lines IS NULL OR lines >= 0),
  bytes bigint CHECK (bytes IS NULL OR bytes >= 0),
  error text CHECK (error IS NULL OR length(error) <= 500),
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);

-- "A user's exports, newest first" (GET, erase).
CREATE INDEX idx_user_memory_exports_user ON public.user_memory_exports (user_id, created_at DESC);

COMMENT ON TABLE public.user_memory_exports IS
  'Asynchronous export jobs: state and the object their JSON Lines went to; deleted by an erase.';

-- End users read their own jobs (RLS); only the service starts and finishes them.
REVOKE ALL ON public.user_memory_exports FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON public.user_memory_exports TO authenticated;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.user_memory_exports TO service_role;
ALTER TABLE public.user_memory_exports ENABLE ROW LEVEL SECURITY;
CREATE POLICY "Users can view own exports" ON public.user_memory_exports FOR SELECT TO authenticated
  USING (auth.uid() = user_id);

-- ---------------------------------------------------------------------------------------------
-- Erasure receipts
-- ---------------------------------------------------------------------------------------------

CREATE TABLE public.user_memory_erasure_receipts (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  user_hash text NOT NULL CHECK (user_hash ~ '^[0-9a-f]{64}$'),
  erased_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  requested_by text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 300),
  deleted jsonb NOT NULL CHECK (jsonb_typeof(deleted) = 'object')
);

-- Operators list receipts newest first (keyset on (erased_at, id)) or by a user's hash.
CREATE INDEX idx_user_memory_erasure_receipts_time ON public.user_memory_erasure_receipts (erased_at DESC, id DESC);
CREATE INDEX idx_user_memory_erasure_receipts_user ON public.user_memory_erasure_receipts (user_hash);

COMMENT ON TABLE public.user_memory_erasure_receipts IS
  'One row per erasure: rows deleted per relation, when, at whose request, a salted hash of the user id.';

-- Receipts are written only by the erase functions; the service reads them. End users have no
-- business here (RLS on, no policy): their receipt is the erase's answer.
REVOKE ALL ON public.user_memory_erasure_receipts FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON public.user_memory_erasure_receipts TO service_role;
ALTER TABLE public.user_memory_erasure_receipts ENABLE ROW LEVEL SECURITY;
CALL public.user_memory_admit_service_role();

CREATE FUNCTION public.user_memory_user_hash(p_user_id uuid)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
  SELECT encode(sha256(convert_to(s.value || ':' || p_user_id::text, 'UTF8')), 'hex')
    FROM public.user_memory_settings s WHERE s.name = 'erasure_receipt_salt'
$$;

REVOKE ALL ON FUNCTION public.user_memory_user_hash(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_user_hash(uuid) TO service_role;

-- The erasure itself: migration 014's deletes in its order (the locks and why are explained
-- there), then the user's export jobs, then the receipt. Only the owner calls it (through the
-- functions below), so nobody names the requester but the code that knows it.
CREATE FUNCTION public.user_memory_erase_receipted(p_user_id uuid, p_requested_by text, p_export_objects integer)
RETURNS public.user_memory_erasure_receipts
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  heads bigint;
  snapshots bigint;
  activity bigint;
  kv_entries bigint;
  conversation_rows bigint;
  message_rows bigint;
  memory_rows bigint;
  item_rows bigint;
  embedding_rows bigint := 0;
  rating_rows bigint;
  digest_rows bigint;
  export_rows bigint;
  receipt public.user_memory_erasure_receipts;
BEGIN
  IF p_user_id IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase: user id is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_export_objects IS NULL OR p_export_objects < 0 THEN
    RAISE EXCEPTION 'user_memory_erase: export objects must be a count' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM 1 FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.user_activity a WHERE a.user_id = p_user_id;
  GET DIAGNOSTICS activity = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', p_user_id::text, true);
  DELETE FROM public.user_memory_snapshots s WHERE s.user_id = p_user_id;
  GET DIAGNOSTICS snapshots = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', '', true);
  DELETE FROM public.user_memory_heads h WHERE h.user_id = p_user_id;
  GET DIAGNOSTICS heads = ROW_COUNT;
  DELETE FROM public.user_memory_kv kv WHERE kv.user_id = p_user_id;
  GET DIAGNOSTICS kv_entries = ROW_COUNT;
  PERFORM 1 FROM public.conversations c WHERE c.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.conversation_memories cm WHERE cm.user_id = p_user_id;
  GET DIAGNOSTICS memory_rows = ROW_COUNT;
  DELETE FROM public.conversation_messages m WHERE m.user_id = p_user_id;
  GET DIAGNOSTICS message_rows = ROW_COUNT;
  DELETE FROM public.conversations c WHERE c.user_id = p_user_id;
  GET DIAGNOSTICS conversation_rows = ROW_COUNT;
  DELETE FROM public.memory_items i WHERE i.user_id = p_user_id;
  GET DIAGNOSTICS item_rows = ROW_COUNT;
  IF to_regclass('public.memory_embeddings') IS NOT NULL THEN
    EXECUTE 'DELETE FROM public.memory_embeddings e WHERE e.user_id = $1' USING p_user_id;
    GET DIAGNOSTICS embedding_rows = ROW_COUNT;
  END IF;
  DELETE FROM public.feedback_ratings f WHERE f.user_id = p_user_id;
  GET DIAGNOSTICS rating_rows = ROW_COUNT;
  DELETE FROM public.daily_digests d WHERE d.user_id = p_user_id;
  GET DIAGNOSTICS digest_rows = ROW_COUNT;
  -- An export still running finds its row gone when it finishes and deletes what it wrote.
  DELETE FROM public.user_memory_exports x WHERE x.user_id = p_user_id;
  GET DIAGNOSTICS export_rows = ROW_COUNT;
  INSERT INTO public.user_memory_erasure_receipts (user_hash, requested_by, deleted)
  VALUES (
    public.user_memory_user_hash(p_user_id),
    p_requested_by,
    jsonb_build_object(
      'user_memory_heads', heads,
      'user_memory_snapshots', snapshots,
      'user_activity', activity,
      'user_memory_kv', kv_entries,
      'conversation_memories', memory_rows,
      'conversation_messages', message_rows,
      'conversations', conversation_rows,
      'memory_items', item_rows,
      'memory_embeddings', embedding_rows,
      'feedback_ratings', rating_rows,
      'daily_digests', digest_rows,
      'user_memory_exports', export_rows,
      'export_objects', p_export_objects
    )
  )
  RETURNING * INTO receipt;
  RETURN receipt;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase_receipted(uuid, text, integer)
  FROM PUBLIC, anon, authenticated, service_role;

-- Migration 014's answer, row for row, from the receipt (the previous release reads it).
CREATE OR REPLACE FUNCTION public.user_memory_erase(p_user_id uuid)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  receipt public.user_memory_erasure_receipts;
BEGIN
  receipt := public.user_memory_erase_receipted(p_user_id, 'service', 0);
  RETURN QUERY
    SELECT r.name, (receipt.deleted ->> r.name)::bigint
      FROM unnest(ARRAY['user_memory_heads', 'user_memory_snapshots', 'user_activity', 'user_memory_kv',
                        'conversation_memories', 'conversation_messages', 'conversations', 'memory_items',
                        'memory_embeddings', 'feedback_ratings', 'daily_digests']) WITH ORDINALITY AS r(name, n)
     ORDER BY r.n;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;

-- The calling end user (auth.uid()), as migration 009's: never a guessed user.
CREATE OR REPLACE FUNCTION public.user_memory_erase_me()
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  receipt public.user_memory_erasure_receipts;
BEGIN
  SELECT * INTO receipt FROM public.user_memory_erase_me_with_receipt(0);
  RETURN QUERY
    SELECT r.name, (receipt.deleted ->> r.name)::bigint
      FROM unnest(ARRAY['user_memory_heads', 'user_memory_snapshots', 'user_activity', 'user_memory_kv',
                        'conversation_memories', 'conversation_messages', 'conversations', 'memory_items',
                        'memory_embeddings', 'feedback_ratings', 'daily_digests']) WITH ORDINALITY AS r(name, n)
     ORDER BY r.n;
END
$$;

CREATE FUNCTION public.user_memory_erase_with_receipt(p_user_id uuid, p_requested_by text, p_export_objects integer)
RETURNS SETOF public.user_memory_erasure_receipts
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  IF p_requested_by IS NULL OR length(p_requested_by) NOT BETWEEN 1 AND 300 OR p_requested_by = 'self' THEN
    RAISE EXCEPTION 'user_memory_erase_with_receipt: the requester must be named (1-300 characters, not self)'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN NEXT public.user_memory_erase_receipted(p_user_id, p_requested_by, p_export_objects);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase_with_receipt(uuid, text, integer) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase_with_receipt(uuid, text, integer) TO service_role;

CREATE FUNCTION public.user_memory_erase_me_with_receipt(p_export_objects integer)
RETURNS SETOF public.user_memory_erasure_receipts
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  me uuid;
BEGIN
  BEGIN
    me := auth.uid();
  EXCEPTION WHEN OTHERS THEN  -- a sub that is not a UUID, claims that are not JSON
    me := NULL;
  END;
  IF me IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase_me: no end user in the request''s claims'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEXT public.user_memory_erase_receipted(me, 'self', p_export_objects);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase_me_with_receipt(integer) FROM PUBLIC, anon, service_role;
GRANT EXECUTE ON FUNCTION public.user_memory_erase_me_with_receipt(integer) TO authenticated;
REVOKE ALL ON FUNCTION public.user_memory_erase_me() FROM PUBLIC, anon, service_role;
GRANT EXECUTE ON FUNCTION public.user_memory_erase_me() TO authenticated;
