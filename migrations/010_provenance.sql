-- Provenance: what produced a version, stored with its row. The daily summary records its mode
-- (edit or whole document), the model, the edits it applied with the model's one-line reasons,
-- the edits the guardrail refused and why, and how much activity was left out of the prompt;
-- `user-memory history` and the library's MemoryStore.history return it.
--
-- Who may do what afterwards (tests/integration/test_security.py proves each line):
--   anon           still nothing.
--   authenticated  reads the provenance of its own rows (the table's SELECT, RLS as before); may
--                  NOT write it: user_memory_append refuses an end user's non-NULL p_provenance
--                  (SQLSTATE 42501). Provenance says what the service's summary did; an end
--                  user's version (the API, an agent's tool call) carries none.
--   service_role   writes it through user_memory_append (a JSON object, or NULL).
--
-- user_memory_append gains p_provenance jsonb DEFAULT NULL. As in 005, the old function is
-- dropped rather than overloaded, so an 8-argument (or 7-argument) call resolves to this one and
-- there is one function to grant and revoke. The body is migration 006's, plus the provenance
-- checks and the column in the INSERT; SECURITY DEFINER, the fixed search_path and the size
-- limit's SET clause are restated. A deployment that changed that limit with ALTER FUNCTION
-- keeps its value: it is read before the DROP and set again after the CREATE.

ALTER TABLE user_memory_snapshots ADD COLUMN provenance jsonb NULL;
COMMENT ON COLUMN user_memory_snapshots.provenance IS
  'What produced this version, when its writer recorded it (the daily summary: mode, model, edits '
  'with reasons, refused edits, activity left out of the prompt); NULL otherwise. Written only by '
  'the service, through user_memory_append.';

DROP FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[]);

-- Migration 006's rules, unchanged, and for provenance:
--   * an end user's p_provenance must be NULL (42501),
--   * for every caller, p_provenance is a JSON object or NULL (22023).

CREATE FUNCTION public.user_memory_append(
  p_user_id uuid,
  p_expected integer,
  p_patch jsonb,
  p_checkpoint boolean,
  p_document jsonb,
  p_source text,
  p_key text,
  p_activity_ids bigint[] DEFAULT NULL,
  p_provenance jsonb DEFAULT NULL
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
    IF p_provenance IS NOT NULL THEN
      RAISE EXCEPTION 'user_memory_append: only the service records provenance'
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
  IF p_provenance IS NOT NULL AND jsonb_typeof(p_provenance) <> 'object' THEN
    RAISE EXCEPTION 'user_memory_append: provenance must be a JSON object or NULL, got %', jsonb_typeof(p_provenance)
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
    (user_id, version, patch, is_full_snapshot, full_snapshot_content, source_description, idempotency_key, created_at,
     provenance)
  VALUES
    (p_user_id, p_expected + 1, p_patch, p_checkpoint, CASE WHEN p_checkpoint THEN p_document END,
     p_source, p_key, ts, p_provenance);
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

REVOKE ALL ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[], jsonb) FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[], jsonb) TO authenticated, service_role;
