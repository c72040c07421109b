-- The service's append nearer its floor (issue 22 section 6): user_memory_append does the same
-- checks, in the same order, with the same errors and outcomes, in fewer statements.
--
-- Measured (docs/benchmarks.md, "The append's own time"): the backend's CPU a version on
-- bench/bench_store.py's history, 020's function 1.41x the floor's one statement (about 300 us over
-- it on the loaded machine), each part found by leaving it out of a copy of the function in turn:
--   * the tables themselves (the version row's foreign key to users, its wider row, its indexes):
--     about 85 us; kept (the key is the history's integrity);
--   * a SECURITY DEFINER PL/pgSQL function with its search_path, and its statements: about 60 us
--     for a function doing nothing but the two writes, about 60 more for 020's control flow (the
--     head's lock, the run key's and the version's tests, the branches for activity and items);
--     the lock itself measured nothing (under 5 us);
--   * the checks, about 100 us: the setting read for the bound (about 40), the size of the sent
--     document (its text, as 015 measures it: about 55), the arguments' checks (about 20); kept.
-- What changes, each measured:
--   * the arguments' checks are one expression that every valid call passes (each IF was a
--     statement of its own to run); inside it, 020's checks in 020's order with 020's messages;
--   * the setting is read by one SELECT INTO (not a subquery inside an expression);
--   * the version's row and the head's are written by one statement (a data-modifying WITH, as the
--     floor's), after the index's rows an old release may still send (they never read the version
--     row); the branches for those rows sit behind one test of p_items.
--   Together about 15 us of the backend's CPU a version (1.42x -> 1.40x the floor's, same run).
-- Same signature, arguments and grants (CREATE OR REPLACE keeps them), so a previous release's
-- calls work unchanged (expand-only); an end user's own checks, patch and index rows are 020's.

CREATE OR REPLACE FUNCTION public.user_memory_append(
  p_user_id uuid,
  p_expected integer,
  p_patch jsonb,
  p_checkpoint boolean,
  p_document jsonb,
  p_source text,
  p_key text,
  p_activity_ids bigint[] DEFAULT NULL,
  p_provenance jsonb DEFAULT NULL,
  p_items jsonb DEFAULT NULL
) RETURNS TABLE (status text, version integer, created_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  caller text := current_setting('role');
  claimed uuid;
  end_user boolean := false;
  max_bytes integer;
  document_bytes integer;
  current_version integer;
  indexed integer;
  head jsonb;
  result jsonb;
  last_checkpoint integer;
  last_written timestamptz;
  recorded integer;
  fresh bigint;
  sections text[];
  scope text[];
  max_items bigint;
  max_index_bytes bigint;
  item_count bigint;
  item_bytes bigint;
  new_paths text[];
  new_kinds text[];
  new_texts text[];
  new_values jsonb[];
  new_statuses text[];
  new_due timestamptz[];
  new_starts timestamptz[];
  new_ends timestamptz[];
  new_recurring boolean[];
  ts timestamptz := clock_timestamp();
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  SELECT s.value::integer INTO max_bytes FROM public.user_memory_settings s WHERE s.name = 'max_document_bytes';
  max_bytes := coalesce(max_bytes, 524288);
  IF NOT (pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE')) THEN
    end_user := true;
    max_items := coalesce((SELECT s.value::bigint FROM public.user_memory_settings s WHERE s.name = 'max_index_items'),
                          20000);
    max_index_bytes := coalesce((SELECT s.value::bigint FROM public.user_memory_settings s
                                  WHERE s.name = 'max_index_bytes'), 4194304);
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
    -- An end user's item changes are its own rows only; bounded, so they cannot be used to store
    -- far more than the document's own size limit allows.
    IF p_items IS NOT NULL AND (jsonb_typeof(p_items) <> 'array' OR jsonb_array_length(p_items) > 50000
        OR octet_length(p_items::text) > 16 * max_bytes) THEN
      RAISE EXCEPTION 'user_memory_append: the item changes are over their limit'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_source IS NULL OR NOT (left(p_source, 3) = 'api' OR left(p_source, 6) = 'agent:') THEN
      RAISE EXCEPTION 'user_memory_append: an end user''s source must start with ''api'' or ''agent:'''
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;

  -- One expression that every valid call passes (each IF is a statement of its own to run); the
  -- checks themselves, in 020's order and with its messages, inside it.
  IF p_user_id IS NULL OR p_expected IS NULL OR p_expected < 0 OR p_checkpoint IS NULL
     OR (p_document IS NOT NULL AND jsonb_typeof(p_document) <> 'object')
     OR jsonb_typeof(p_patch) IS DISTINCT FROM 'array' OR pg_column_size(p_patch) > 2 * max_bytes
     OR (p_items IS NOT NULL AND jsonb_typeof(p_items) <> 'array')
     OR (p_provenance IS NOT NULL AND jsonb_typeof(p_provenance) <> 'object') THEN
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
    IF p_document IS NOT NULL AND jsonb_typeof(p_document) <> 'object' THEN
      RAISE EXCEPTION 'user_memory_append: the document must be a JSON object, got %', jsonb_typeof(p_document)
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(p_patch) IS DISTINCT FROM 'array' THEN
      RAISE EXCEPTION 'user_memory_append: the patch must be a JSON array, got %', coalesce(jsonb_typeof(p_patch), 'NULL')
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_column_size(p_patch) > 2 * max_bytes THEN
      RAISE EXCEPTION 'user_memory_append: the patch is % bytes, over twice the document limit of %',
        pg_column_size(p_patch), max_bytes USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_items IS NOT NULL AND jsonb_typeof(p_items) <> 'array' THEN
      RAISE EXCEPTION 'user_memory_append: items must be a JSON array or NULL, got %', jsonb_typeof(p_items)
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_provenance IS NOT NULL AND jsonb_typeof(p_provenance) <> 'object' THEN
      RAISE EXCEPTION 'user_memory_append: provenance must be a JSON object or NULL, got %', jsonb_typeof(p_provenance)
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END IF;
  IF p_document IS NOT NULL THEN  -- refused before any lock; a computed document is measured below
    document_bytes := octet_length(p_document::text);
    IF document_bytes > max_bytes THEN
      RAISE EXCEPTION 'user_memory_append: document is % bytes, over the limit of %', document_bytes, max_bytes
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END IF;

  IF end_user OR p_document IS NULL THEN
    SELECT h.version, h.indexed_version, h.updated_at, h.document INTO current_version, indexed, last_written, head
      FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  ELSE
    SELECT h.version, h.indexed_version, h.updated_at INTO current_version, indexed, last_written
      FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  END IF;
  -- A user's versions are stamped in order, whatever the clock does (version_at relies on it).
  ts := greatest(ts, last_written);
  IF p_key IS NOT NULL THEN
    SELECT s.version INTO recorded
      FROM public.user_memory_snapshots s
     WHERE (s.user_id::text || ' ' || s.idempotency_key) = (p_user_id::text || ' ' || p_key)
       AND s.user_id = p_user_id AND s.idempotency_key = p_key;
    IF recorded IS NOT NULL THEN
      RETURN QUERY SELECT 'idempotent'::text, recorded, NULL::timestamptz;
      RETURN;
    END IF;
  END IF;
  IF coalesce(current_version, 0) <> p_expected THEN
    RETURN QUERY SELECT 'conflict'::text, coalesce(current_version, 0), NULL::timestamptz;
    RETURN;
  END IF;
  -- The stored patch must rebuild the stored document: an end user's is applied here (the service
  -- diffed and verified its own). Version 0 is the empty document.
  IF end_user OR p_document IS NULL THEN
    result := public.user_memory_apply_patch(coalesce(head, '{}'), p_patch, 2 * max_bytes);
    IF jsonb_typeof(result) <> 'object' THEN
      RAISE EXCEPTION 'user_memory_append: the patch turns the document into a %, not a JSON object', jsonb_typeof(result)
        USING ERRCODE = 'UMP01';
    END IF;
    IF p_document IS NULL THEN
      document_bytes := octet_length(result::text);
      IF document_bytes > max_bytes THEN
        RAISE EXCEPTION 'user_memory_append: document is % bytes, over the limit of %', document_bytes, max_bytes
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
    ELSIF result <> p_document THEN
      RAISE EXCEPTION 'user_memory_append: the document is not the patch applied to version %', p_expected
        USING ERRCODE = 'UMP03',
              HINT = 'Send the patch from the head to the document, or NULL as the document.';
    END IF;
    p_document := result;
  END IF;
  -- A writer that never asks for a checkpoint would make every later read of its versions apply
  -- all their patches: an end user's version is one at the latest 200 versions after the last.
  IF end_user AND NOT p_checkpoint AND p_expected + 1 >= 200 THEN
    SELECT max(s.version) INTO last_checkpoint
      FROM public.user_memory_snapshots s WHERE s.user_id = p_user_id AND s.is_full_snapshot;
    p_checkpoint := p_expected + 1 - coalesce(last_checkpoint, 0) >= 200;
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
  -- The search index follows the head only while it is in step with it (indexed_version is the
  -- head's version): the item changes are a diff against the previous head. Otherwise, or without
  -- items, the index is left behind and user_memory_reindex brings it up to date.
  IF p_items IS NULL THEN
    NULL;  -- the service since 022: the index catches up after the append (user_memory_index_catch_up)
  ELSIF coalesce(indexed, 0) = coalesce(current_version, 0) AND end_user THEN
    -- An end user's rows are the result document's, computed here for the sections the patch
    -- touched (all of them for a patch at the root); every other row under those sections goes.
    -- Only a recurring event's recur_until is taken from the rows sent (or kept), bounded.
    sections := public.user_memory_index_sections(p_patch);
    scope := CASE WHEN sections IS NOT NULL THEN public.user_memory_index_scope(p_document, sections) END;
    -- The user's rows are bounded (rows of user_memory_settings) before anything is written: the
    -- rows outside the scope stay, the scope's become the result's (a document of a thousand
    -- short strings under a long key would otherwise make an index far larger than itself).
    IF scope IS NOT NULL THEN
      SELECT count(*), coalesce(sum(pg_column_size(i.text) + pg_column_size(i.value)), 0) INTO item_count, item_bytes
        FROM public.memory_items i
       WHERE i.user_id = p_user_id
         AND NOT EXISTS (SELECT 1 FROM unnest(scope) p WHERE i.path = p OR left(i.path, length(p) + 1) = p || '/');
    ELSE
      item_count := 0;
      item_bytes := 0;
    END IF;
    SELECT array_agg(f.item_path), array_agg(f.item_kind), array_agg(f.item_text), array_agg(f.item_value),
           array_agg(f.item_status), array_agg(f.item_due_at), array_agg(f.item_starts_at), array_agg(f.item_ends_at),
           array_agg(f.item_recurring), item_count + count(*),
           item_bytes + coalesce(sum(pg_column_size(f.item_text) + pg_column_size(f.item_value)), 0)
      INTO new_paths, new_kinds, new_texts, new_values, new_statuses, new_due, new_starts, new_ends, new_recurring,
           item_count, item_bytes
      FROM public.user_memory_index_items(p_document, sections, max_items - item_count) f;
    IF item_count > max_items OR item_bytes > max_index_bytes THEN
      RAISE EXCEPTION 'user_memory_append: the search index would hold % items of % bytes, over the limit of % items or % bytes',
        item_count, item_bytes, max_items, max_index_bytes USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM public.memory_items i
     WHERE i.user_id = p_user_id
       AND (scope IS NULL
            OR EXISTS (SELECT 1 FROM unnest(scope) p WHERE i.path = p OR left(i.path, length(p) + 1) = p || '/'))
       AND NOT EXISTS (SELECT 1 FROM unnest(new_paths) n(path) WHERE n.path = i.path);
    WITH sent AS (
           SELECT DISTINCT ON (x ->> 'path') x ->> 'path' AS path, x -> 'recur_until' AS recur_until
             FROM jsonb_array_elements(p_items) x
            WHERE jsonb_typeof(x) = 'object' AND (x -> 'remove') IS DISTINCT FROM 'true'::jsonb
            ORDER BY x ->> 'path')
    INSERT INTO public.memory_items AS i
      (user_id, path, version, kind, text, value, status, due_at, starts_at, ends_at, recurring, recur_until, updated_at)
    SELECT p_user_id, f.path, p_expected + 1, f.kind, f.text, f.value, f.status, f.due_at, f.starts_at, f.ends_at,
           f.recurring,
           CASE WHEN NOT f.recurring THEN NULL
                WHEN s.path IS NOT NULL THEN public.user_memory_index_until(s.recur_until)
                ELSE kept.recur_until END,
           ts
      FROM unnest(new_paths, new_kinds, new_texts, new_values, new_statuses, new_due, new_starts, new_ends, new_recurring)
           AS f(path, kind, text, value, status, due_at, starts_at, ends_at, recurring)
      LEFT JOIN sent s ON s.path = f.path
      LEFT JOIN public.memory_items kept ON kept.user_id = p_user_id AND kept.path = f.path AND kept.recurring
    ON CONFLICT (user_id, path) DO UPDATE
       SET version = EXCLUDED.version, kind = EXCLUDED.kind, text = EXCLUDED.text, value = EXCLUDED.value,
           status = EXCLUDED.status, due_at = EXCLUDED.due_at, starts_at = EXCLUDED.starts_at,
           ends_at = EXCLUDED.ends_at, recurring = EXCLUDED.recurring, recur_until = EXCLUDED.recur_until,
           updated_at = EXCLUDED.updated_at
     WHERE (i.kind, i.text, i.value, i.status, i.due_at, i.starts_at, i.ends_at, i.recurring, i.recur_until)
           IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.text, EXCLUDED.value, EXCLUDED.status, EXCLUDED.due_at,
                             EXCLUDED.starts_at, EXCLUDED.ends_at, EXCLUDED.recurring, EXCLUDED.recur_until);
    indexed := p_expected + 1;
  ELSIF coalesce(indexed, 0) = coalesce(current_version, 0) THEN
    -- The service's rows are the ones it diffed and verified.
    IF jsonb_path_exists(p_items, '$[*] ? (@.remove == true)') THEN
      DELETE FROM public.memory_items i
       WHERE i.user_id = p_user_id
         AND i.path IN (SELECT x ->> 'path' FROM jsonb_array_elements(p_items) x
                         WHERE (x ->> 'remove')::boolean IS TRUE);
    END IF;
    INSERT INTO public.memory_items AS i
      (user_id, path, version, kind, text, value, status, due_at, starts_at, ends_at, recurring, recur_until, updated_at)
    SELECT p_user_id, r.path, p_expected + 1, r.kind, r.text, r.value, r.status, r.due_at, r.starts_at, r.ends_at,
           coalesce(r.recurring, false), r.recur_until, ts
      FROM jsonb_to_recordset(p_items) AS r(path text, remove boolean, kind text, text text, value jsonb, status text,
                                            due_at timestamptz, starts_at timestamptz, ends_at timestamptz,
                                            recurring boolean, recur_until timestamptz)
     WHERE NOT coalesce(r.remove, false)
    ON CONFLICT (user_id, path) DO UPDATE
       SET version = EXCLUDED.version, kind = EXCLUDED.kind, text = EXCLUDED.text, value = EXCLUDED.value,
           status = EXCLUDED.status, due_at = EXCLUDED.due_at, starts_at = EXCLUDED.starts_at,
           ends_at = EXCLUDED.ends_at, recurring = EXCLUDED.recurring, recur_until = EXCLUDED.recur_until,
           updated_at = EXCLUDED.updated_at;
    indexed := p_expected + 1;
  END IF;
  -- The version's row and the head's in one statement (one plan to run, not two).
  WITH version_row AS (
    INSERT INTO public.user_memory_snapshots
      (user_id, version, patch, is_full_snapshot, full_snapshot_content, source_description, idempotency_key, created_at,
       provenance)
    VALUES
      (p_user_id, p_expected + 1, p_patch, p_checkpoint, CASE WHEN p_checkpoint THEN p_document END,
       p_source, p_key, ts, p_provenance))
  INSERT INTO public.user_memory_heads AS h (user_id, version, document, source_description, updated_at, indexed_version)
  VALUES (p_user_id, p_expected + 1, p_document, p_source, ts, coalesce(indexed, 0))
  ON CONFLICT (user_id) DO UPDATE
     SET version = EXCLUDED.version, document = EXCLUDED.document,
         source_description = EXCLUDED.source_description, updated_at = EXCLUDED.updated_at,
         indexed_version = EXCLUDED.indexed_version;
  IF p_activity_ids IS NOT NULL THEN
    UPDATE public.user_activity a SET summarized_version = p_expected + 1
     WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL;
  END IF;
  RETURN QUERY SELECT 'written'::text, p_expected + 1, ts;
END
$$;
