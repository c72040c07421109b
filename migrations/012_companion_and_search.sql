-- The companion memory layer and search over memory.
--
--   memory_items        the search index and the companion's query tables in one: one row per
--                       item of a user's head document (a document leaf, or an element: a goal,
--                       to-do, event, part or list entry), with its JSON Pointer, the version
--                       that last changed it, its text (full-text vector generated from it), its
--                       JSON value, and for elements the typed columns the queries need (status,
--                       due_at, starts_at, ends_at, recurrence). Written only inside
--                       user_memory_append, in the transaction that writes the version, from the
--                       item changes the service computed for the version's patch: an item the
--                       patch did not touch keeps its row and its version; a removed item leaves
--                       with the version that removed it. user_memory_heads.indexed_version says
--                       which version the index reflects; user_memory_reindex() rebuilds a user
--                       whose index is behind (a deployment that had versions before this
--                       migration, a writer that sent no items).
--   memory_embeddings   one vector per distinct item text of a user (keyed by the text's md5):
--                       an item whose text did not change is never embedded again, and an item
--                       that moved (a list entry's index) reuses its vector. Created only where
--                       the pgvector extension is available; an HNSW index (cosine) serves the
--                       operators' search across users. Orphans (no item has the text any more)
--                       are invisible to search (it joins through memory_items) and are removed
--                       by the daily retention run.
--   feedback_ratings    raw feedback ratings (episodic): interaction id, rating 1-5, tags,
--                       comment, time; the nightly run summarizes the unsummarized ones into the
--                       companion document's feedback element (summarized_version).
--   daily_digests       one digest per user and day (due and overdue to-dos, events of the next 7
--                       days, goals near their target date), written by the daily run.
--
-- Who may do what (tests/integration/test_companion_sql.py proves it):
--   anon           nothing.
--   authenticated  SELECT of its own rows of the four tables (RLS); its own ratings only through
--                  user_memory_record_rating (never summarized_version); its own items only through
--                  user_memory_append (as its own versions, bounded); no vectors (the service
--                  embeds, so nobody can plant a vector in the operators' search across users).
--   service_role   SELECT of all, writes through the functions, ratings and digests directly.
-- user_memory_erase (and so user_memory_erase_me) now removes all four.

ALTER TABLE user_memory_heads ADD COLUMN indexed_version integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN user_memory_heads.indexed_version IS
  'The version memory_items reflects; behind version when the index needs user_memory_reindex.';

CREATE TABLE memory_items (
  user_id uuid NOT NULL,
  path text COLLATE "C" NOT NULL,
  version integer NOT NULL,
  kind text NOT NULL,
  text text NOT NULL,
  value jsonb NOT NULL,
  status text NULL,
  due_at timestamptz NULL,
  starts_at timestamptz NULL,
  ends_at timestamptz NULL,
  recurring boolean NOT NULL DEFAULT false,
  recur_until timestamptz NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  text_md5 text GENERATED ALWAYS AS (md5(text)) STORED,
  tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
  CONSTRAINT memory_items_pkey PRIMARY KEY (user_id, path),
  -- The service leaves longer pointers out of the index (domain/items.py: MAX_PATH_BYTES).
  CONSTRAINT memory_items_path_check CHECK (left(path, 1) = '/' AND octet_length(path) <= 1000),
  CONSTRAINT memory_items_version_check CHECK (version >= 1),
  CONSTRAINT memory_items_text_check CHECK (octet_length(text) <= 16384)
);

-- Full-text search is per user: the primary key's user prefix finds the user's rows (hundreds),
-- then the stored tsvector is matched. No GIN index: it would only serve searches across users,
-- and it cost every version about 0.4 ms (measured) to maintain.
-- "To-dos due or overdue": open to-dos of a user in due order.
CREATE INDEX idx_memory_items_todos_open ON memory_items (user_id, due_at)
  WHERE kind = 'todo' AND status IN ('open', 'in_progress');
-- "Events in a range": a user's events by start (recurring ones carry recur_until).
CREATE INDEX idx_memory_items_events ON memory_items (user_id, starts_at)
  WHERE kind = 'event';
-- "Active goals", nearest target date first.
CREATE INDEX idx_memory_items_goals_active ON memory_items (user_id, due_at)
  WHERE kind = 'goal' AND status = 'active';

COMMENT ON TABLE memory_items IS
  'One row per item of a user''s head document (leaf or element): path, version that last changed it, text, value, typed columns.';

CREATE TABLE feedback_ratings (
  id bigint GENERATED ALWAYS AS IDENTITY,
  user_id uuid NOT NULL,
  interaction_id text NOT NULL,
  rating smallint NOT NULL,
  tags text[] NOT NULL DEFAULT '{}',
  comment text NOT NULL DEFAULT '',
  rated_at timestamptz NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  summarized_version integer NULL,
  CONSTRAINT feedback_ratings_pkey PRIMARY KEY (id),
  CONSTRAINT feedback_ratings_interaction_key UNIQUE (user_id, interaction_id),
  CONSTRAINT feedback_ratings_rating_check CHECK (rating BETWEEN 1 AND 5),
  CONSTRAINT feedback_ratings_interaction_check
    CHECK (char_length(interaction_id) BETWEEN 1 AND 200 AND interaction_id !~ E'[\\x01-\\x1f\\x7f-\\x9f]'),
  CONSTRAINT feedback_ratings_tags_check CHECK (cardinality(tags) <= 20),
  CONSTRAINT feedback_ratings_comment_check CHECK (char_length(comment) <= 2000)
);
-- The nightly run's input: a user's unsummarized ratings (and the fan-out's users to visit).
CREATE INDEX idx_feedback_ratings_unsummarized ON feedback_ratings (user_id, id) WHERE summarized_version IS NULL;

CREATE TABLE daily_digests (
  user_id uuid NOT NULL,
  day date NOT NULL,
  digest jsonb NOT NULL,
  version integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT daily_digests_pkey PRIMARY KEY (user_id, day),
  CONSTRAINT daily_digests_digest_check CHECK (jsonb_typeof(digest) = 'object')
);

-- ---------------------------------------------------------------------------------------------
-- Vectors (only where pgvector is available)
-- ---------------------------------------------------------------------------------------------

-- The extension is created here only when the owner may (a superuser; RDS's rds_superuser;
-- Supabase's postgres). Otherwise the migration goes on without vectors (full-text search works)
-- and says so; migration 013's user_memory_enable_vectors() adds the table once an administrator
-- has created the extension (`user-memory migrate` calls it every time).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
     AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
    BEGIN
      CREATE EXTENSION vector;
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE NOTICE 'pgvector is available but this role may not create it: vector search stays off';
    END;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
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
  END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Privileges and row-level security
-- ---------------------------------------------------------------------------------------------

REVOKE ALL ON memory_items, feedback_ratings, daily_digests FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON memory_items, feedback_ratings, daily_digests TO authenticated;
GRANT SELECT ON memory_items TO service_role;
GRANT SELECT, INSERT, UPDATE ON feedback_ratings, daily_digests TO service_role;

ALTER TABLE memory_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE feedback_ratings ENABLE ROW LEVEL SECURITY;
ALTER TABLE daily_digests ENABLE ROW LEVEL SECURITY;

CREATE POLICY "Users can view own memory items" ON memory_items FOR SELECT USING (auth.uid() = user_id);
CREATE POLICY "Users can view own ratings" ON feedback_ratings FOR SELECT USING (auth.uid() = user_id);
CREATE POLICY "Users can view own digests" ON daily_digests FOR SELECT USING (auth.uid() = user_id);

-- ---------------------------------------------------------------------------------------------
-- The caller's user: an end user may only name itself (shared by the functions below)
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION public.user_memory_check_owner(p_user_id uuid, p_function text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  caller text := current_setting('role');
  claimed uuid;
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  IF pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE') THEN
    RETURN;
  END IF;
  BEGIN
    claimed := auth.uid();
  EXCEPTION WHEN OTHERS THEN
    claimed := NULL;
  END;
  IF claimed IS NULL OR p_user_id IS DISTINCT FROM claimed THEN
    RAISE EXCEPTION '%: may only write own rows', p_function USING ERRCODE = 'insufficient_privilege';
  END IF;
END
$$;
-- Called only from the SECURITY DEFINER functions below (as their owner): nobody else may.
REVOKE ALL ON FUNCTION public.user_memory_check_owner(uuid, text) FROM PUBLIC, anon, authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_append: migration 010's function, plus the version's item changes (p_items)
-- ---------------------------------------------------------------------------------------------

-- p_items: a JSON array of item changes computed by the service for this version's patch:
-- {"path": ..., "remove": true} or {"path", "kind", "text", "value", "status", "due_at",
-- "starts_at", "ends_at", "recurring", "recur_until"}. Applied only when the version is written
-- and the index was in step with the previous head. As in 010, the old function is dropped (its
-- size limit kept), not overloaded.

DROP FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[], jsonb);

CREATE FUNCTION public.user_memory_append(
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
  max_bytes integer;
  document_bytes integer;
  current_version integer;
  indexed integer;
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
    -- An end user's item changes are its own rows only; bounded, so they cannot be used to store
    -- far more than the document's own size limit allows.
    IF p_items IS NOT NULL AND (jsonb_typeof(p_items) <> 'array' OR jsonb_array_length(p_items) > 50000
        OR octet_length(p_items::text) > 16 * coalesce((SELECT s.value::integer FROM public.user_memory_settings s WHERE s.name = 'max_document_bytes'), 524288)) THEN
      RAISE EXCEPTION 'user_memory_append: the item changes are over their limit'
        USING ERRCODE = 'invalid_parameter_value';
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
  IF p_items IS NOT NULL AND jsonb_typeof(p_items) <> 'array' THEN
    RAISE EXCEPTION 'user_memory_append: items must be a JSON array or NULL, got %', jsonb_typeof(p_items)
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

  SELECT h.version, h.indexed_version INTO current_version, indexed
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
  -- The search index follows the head only while it is in step with it (indexed_version is the
  -- head's version): the item changes are a diff against the previous head. Otherwise, or without
  -- items, the index is left behind and user_memory_reindex brings it up to date.
  IF p_items IS NOT NULL AND coalesce(indexed, 0) = coalesce(current_version, 0) THEN
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


REVOKE ALL ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[], jsonb, jsonb) FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[], jsonb, jsonb) TO authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_reindex: replace a user's items with the full set for its head version
-- ---------------------------------------------------------------------------------------------

-- For the service only (a deployment's first index, a user left behind). p_version must be the
-- head's version (else 'conflict' and nothing changes); the rows are the head document's items.
CREATE FUNCTION public.user_memory_reindex(p_user_id uuid, p_version integer, p_items jsonb)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  current_version integer;
BEGIN
  IF jsonb_typeof(p_items) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'user_memory_reindex: items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT h.version INTO current_version FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  IF current_version IS NULL OR current_version <> p_version THEN
    RETURN 'conflict';
  END IF;
  DELETE FROM public.memory_items i WHERE i.user_id = p_user_id;
  INSERT INTO public.memory_items
    (user_id, path, version, kind, text, value, status, due_at, starts_at, ends_at, recurring, recur_until)
  SELECT p_user_id, r.path, coalesce(r.version, p_version), r.kind, r.text, r.value, r.status, r.due_at, r.starts_at,
         r.ends_at, coalesce(r.recurring, false), r.recur_until
    FROM jsonb_to_recordset(p_items) AS r(path text, version integer, kind text, text text, value jsonb, status text,
                                          due_at timestamptz, starts_at timestamptz, ends_at timestamptz,
                                          recurring boolean, recur_until timestamptz);
  UPDATE public.user_memory_heads h SET indexed_version = p_version WHERE h.user_id = p_user_id;
  RETURN 'reindexed';
END
$$;
REVOKE ALL ON FUNCTION public.user_memory_reindex(uuid, integer, jsonb) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_reindex(uuid, integer, jsonb) TO service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_store_embeddings: vectors for texts of the caller's own items
-- ---------------------------------------------------------------------------------------------

-- p_rows: [{"text_md5": ..., "embedding": [256 numbers]}]. Only texts some item of the user has
-- are stored (others are skipped); returns how many rows were stored. The service's only (the
-- API embeds a user's new texts with the service's rights, after the user's write committed).
CREATE FUNCTION public.user_memory_store_embeddings(p_user_id uuid, p_model text, p_rows jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  stored integer;
BEGIN
  PERFORM public.user_memory_check_owner(p_user_id, 'user_memory_store_embeddings');
  IF to_regclass('public.memory_embeddings') IS NULL THEN
    RAISE EXCEPTION 'user_memory_store_embeddings: the pgvector extension is not installed'
      USING ERRCODE = 'feature_not_supported';
  END IF;
  IF jsonb_typeof(p_rows) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'user_memory_store_embeddings: rows must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  EXECUTE $q$
    INSERT INTO public.memory_embeddings AS e (user_id, text_md5, model, embedding)
    SELECT $1, r.text_md5, $2, (r.embedding::text)::vector
      FROM jsonb_to_recordset($3) AS r(text_md5 text, embedding jsonb)
     WHERE EXISTS (SELECT 1 FROM public.memory_items i WHERE i.user_id = $1 AND i.text_md5 = r.text_md5)
    ON CONFLICT (user_id, text_md5) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding,
                                                  created_at = now()
  $q$ USING p_user_id, p_model, p_rows;
  GET DIAGNOSTICS stored = ROW_COUNT;
  RETURN stored;
END
$$;
-- The service only: a vector an end user chose would take over the operators' search across users.
REVOKE ALL ON FUNCTION public.user_memory_store_embeddings(uuid, text, jsonb) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_store_embeddings(uuid, text, jsonb) TO service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_record_rating: a rating, new or changed (then summarized again)
-- ---------------------------------------------------------------------------------------------

-- Returns 'created', 'updated' (a different rating, tags or comment for the interaction: it
-- is summarized again) or 'unchanged'.
CREATE FUNCTION public.user_memory_record_rating(
  p_user_id uuid, p_interaction_id text, p_rating integer, p_tags text[], p_comment text, p_rated_at timestamptz
) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  old public.feedback_ratings%ROWTYPE;
BEGIN
  PERFORM public.user_memory_check_owner(p_user_id, 'user_memory_record_rating');
  IF EXISTS (SELECT 1 FROM unnest(coalesce(p_tags, '{}')) t WHERE char_length(t) NOT BETWEEN 1 AND 50) THEN
    RAISE EXCEPTION 'user_memory_record_rating: a tag is 1 to 50 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT * INTO old FROM public.feedback_ratings f
   WHERE f.user_id = p_user_id AND f.interaction_id = p_interaction_id FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO public.feedback_ratings (user_id, interaction_id, rating, tags, comment, rated_at)
    VALUES (p_user_id, p_interaction_id, p_rating, coalesce(p_tags, '{}'), coalesce(p_comment, ''), p_rated_at)
    ON CONFLICT (user_id, interaction_id) DO NOTHING;
    RETURN 'created';
  END IF;
  IF old.rating = p_rating AND old.tags = coalesce(p_tags, '{}') AND old.comment = coalesce(p_comment, '') THEN
    RETURN 'unchanged';
  END IF;
  UPDATE public.feedback_ratings f
     SET rating = p_rating, tags = coalesce(p_tags, '{}'), comment = coalesce(p_comment, ''), rated_at = p_rated_at,
         recorded_at = now(), summarized_version = NULL
   WHERE f.id = old.id;
  RETURN 'updated';
END
$$;
REVOKE ALL ON FUNCTION public.user_memory_record_rating(uuid, text, integer, text[], text, timestamptz) FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_record_rating(uuid, text, integer, text[], text, timestamptz)
  TO authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_erase: also the items, vectors, ratings and digests
-- ---------------------------------------------------------------------------------------------

-- Migration 011's function, then the four relations of this migration (reported as four more
-- rows; memory_embeddings counts 0 where pgvector is not installed).
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
  conversation_rows bigint;
  message_rows bigint;
  memory_rows bigint;
  item_rows bigint;
  embedding_rows bigint := 0;
  rating_rows bigint;
  digest_rows bigint;
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
  -- Conversations: memories, messages, then the conversations themselves.
  PERFORM 1 FROM public.conversations c WHERE c.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.conversation_memories cm
   USING public.conversations c
   WHERE c.user_id = p_user_id AND cm.conversation_id = c.conversation_id;
  GET DIAGNOSTICS memory_rows = ROW_COUNT;
  DELETE FROM public.conversation_messages m
   USING public.conversations c
   WHERE c.user_id = p_user_id AND m.conversation_id = c.conversation_id;
  GET DIAGNOSTICS message_rows = ROW_COUNT;
  DELETE FROM public.conversations c WHERE c.user_id = p_user_id;
  GET DIAGNOSTICS conversation_rows = ROW_COUNT;
  -- The companion layer and the search index.
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
  RETURN QUERY VALUES ('user_memory_heads'::text, heads),
                      ('user_memory_snapshots'::text, snapshots),
                      ('user_activity'::text, activity),
                      ('user_memory_kv'::text, kv_entries),
                      ('conversation_memories'::text, memory_rows),
                      ('conversation_messages'::text, message_rows),
                      ('conversations'::text, conversation_rows),
                      ('memory_items'::text, item_rows),
                      ('memory_embeddings'::text, embedding_rows),
                      ('feedback_ratings'::text, rating_rows),
                      ('daily_digests'::text, digest_rows);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;
