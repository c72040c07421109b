-- Erasure receipts count the outbox an erase takes, and imports through the API (issue 25).
--
--   user_memory_imports          one row per import job (POST /admin/imports): the user it writes
--                                into, who asked, its state, the object (S3 key or local file) the
--                                export was uploaded to, what it wrote, why it failed. No content.
--                                Only the service writes; an end user reads the imports into its
--                                own memory (RLS), as its erase deletes their uploaded files.
--   user_memory_erase_receipted  same signature; the receipt's `deleted` also counts the user's
--                                memory-changed events (user_memory_events), their delivery marks
--                                (user_memory_event_deliveries), both deleted with the version rows
--                                by migration 026's trigger, the webhook deliveries still owed for
--                                them (pending_webhook_deliveries: never sent now), and the user's
--                                import jobs (user_memory_imports, deleted here).
--
-- Expand-only: a new table; the function keeps its signature, its return type and every key it
-- answered; the erases of migration 027 (user_memory_erase's eleven rows included) call it unchanged.

CREATE TABLE public.user_memory_imports (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  user_id uuid NOT NULL,
  requested_by text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 300),
  status text NOT NULL DEFAULT 'awaiting_upload'
    CHECK (status IN ('awaiting_upload', 'queued', 'running', 'done', 'failed')),
  object_key text NOT NULL CHECK (length(object_key) BETWEEN 1 AND 1024),
  versions integer CHECK (versions IS NULL OR versions >= 0),
  kv integer CHECK (kv IS NULL OR kv >= 0),
  error_type text CHECK (error_type IS NULL OR length(error_type) <= 100),
  error text CHECK (error IS NULL OR length(error) <= 500),
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz
);

-- "A user's imports" (the erase).
CREATE INDEX idx_user_memory_imports_user ON public.user_memory_imports (user_id, created_at DESC);

COMMENT ON TABLE public.user_memory_imports IS
  'Import jobs started through the API: state, the uploaded object, what was written; deleted by an erase.';

REVOKE ALL ON public.user_memory_imports FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON public.user_memory_imports TO authenticated;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.user_memory_imports TO service_role;
ALTER TABLE public.user_memory_imports ENABLE ROW LEVEL SECURITY;
CREATE POLICY "Users can view own imports" ON public.user_memory_imports FOR SELECT TO authenticated
  USING (auth.uid() = user_id);
CALL public.user_memory_admit_service_role();

CREATE OR REPLACE FUNCTION public.user_memory_erase_receipted(p_user_id uuid, p_requested_by text, p_export_objects integer)
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
  event_rows bigint;
  delivery_rows bigint;
  pending_rows bigint;
  import_rows bigint;
  receipt public.user_memory_erasure_receipts;
BEGIN
  IF p_user_id IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase: user id is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_export_objects IS NULL OR p_export_objects < 0 THEN
    RAISE EXCEPTION 'user_memory_erase: export objects must be a count' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- An import into this user holds its job's row until it commits (jobs/imports.py): wait for it,
  -- so what it wrote is erased too; an import that comes after finds its row gone and writes
  -- nothing. Taken before the head, as the import takes them, so neither waits on the other twice.
  PERFORM 1 FROM public.user_memory_imports i WHERE i.user_id = p_user_id FOR UPDATE;
  PERFORM 1 FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.user_activity a WHERE a.user_id = p_user_id;
  GET DIAGNOSTICS activity = ROW_COUNT;
  -- The outbox goes with the versions (migration 026's trigger): count it first. Locking the
  -- user's events keeps a relay from marking one delivered between the count and the delete (the
  -- mark's foreign key check waits on the lock, as it would on the delete's), and the head's lock
  -- above keeps new events out, so the counts are what the delete takes.
  SELECT count(*) INTO event_rows
    FROM (SELECT 1 FROM public.user_memory_events e WHERE e.user_id = p_user_id FOR UPDATE) locked;
  SELECT count(*) INTO delivery_rows
    FROM public.user_memory_event_deliveries d
    JOIN public.user_memory_events e ON e.id = d.event_id
   WHERE e.user_id = p_user_id;
  -- Webhook deliveries still owed (an event after the endpoint's registration, not yet marked
  -- delivered to it): never sent now. Disabled endpoints count too: enabling one would send them.
  SELECT count(*) INTO pending_rows
    FROM public.user_memory_events e
    JOIN public.user_memory_webhooks w ON e.id > w.after_event_id
   WHERE e.user_id = p_user_id
     AND NOT EXISTS (SELECT 1 FROM public.user_memory_event_deliveries d
                      WHERE d.sink = w.id::text AND d.event_id = e.id);
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
  -- The caller deleted the uploads of these jobs before (with the export objects).
  DELETE FROM public.user_memory_imports i WHERE i.user_id = p_user_id;
  GET DIAGNOSTICS import_rows = ROW_COUNT;
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
      'export_objects', p_export_objects,
      'user_memory_events', event_rows,
      'user_memory_event_deliveries', delivery_rows,
      'pending_webhook_deliveries', pending_rows,
      'user_memory_imports', import_rows
    )
  )
  RETURNING * INTO receipt;
  RETURN receipt;
END
$$;
