-- End users' versions stored as patches: user_memory_append applies an end user's RFC 6902 patch
-- to the head itself, so the stored patch rebuilds the stored document by construction.
--
-- Until now an end user's version (the API, an agent's tool call) was always stored as a full
-- checkpoint: the database could not trust its patch, so a patch that did not produce its document
-- could not be allowed to break the history's rebuild. Now, for an end user:
--   * the function applies p_patch to the locked head document (user_memory_apply_patch below),
--   * a p_document that is not that result is refused (SQLSTATE UMP03); NULL p_document means
--     "the result", and the result is what is stored (head and checkpoint),
--   * p_checkpoint is honoured like the service's (the service sets it every CHECKPOINT_INTERVAL
--     versions); a forged false cannot leave more than 200 versions since the last checkpoint
--     (the 200th is made one), so a rebuild stays bounded whatever an end user sends.
-- The service's calls are unchanged: a given document is trusted (it was diffed and verified in
-- the service), so its append does not pay for the patch a second time (applying it for the
-- service too was measured no cheaper: bench/bench_store.py --database-applies); a service call
-- with a NULL document has the patch applied as well.
--
-- History's own bytes, now that most versions are patches (bench/bench_history.py): the version
-- rows lose the seed's random `id` key ((user_id, version) is the primary key), the index of every
-- row's time (as_of finds its version between two checkpoints: versions are stamped in order) and
-- the b-tree of idempotency keys (a hash index instead).
--
-- Who may do what: unchanged from 012 and 013. The four functions of the applier are the owner's
-- only (the SECURITY DEFINER append calls them as their owner); nobody else may execute them.

-- ---------------------------------------------------------------------------------------------
-- RFC 6902 in the database: user_memory_apply_patch(document, patch)
-- ---------------------------------------------------------------------------------------------

-- The same rules as the service's applier (domain/patching.py), so that a patch applies the same
-- way on both sides or fails on both: JSON Pointers (RFC 6901) with ~0 and ~1 escapes, array
-- indexes without leading zeros, '-' only where an element is added, `test` exact about JSON
-- types (1 is not 1.0, true is not 1: as the service reads numbers back, one with a '.' in its
-- text is a float), `move` never into its own child, the whole document never removed. Bounded:
-- at most 1,000 operations, pointers of at most 2,048 bytes and 100 tokens, a result of at most
-- twice the caller's document limit along the way. A patch that does not apply is refused with
-- SQLSTATE UMP01, one over its bounds with UMP02; the message names the operation (from 0) and
-- what failed, never a value or a key.
--
-- These functions have no SET clause (a SET clause costs a configuration save and restore per
-- call, measured at a fifth of a small patch's time): they are executable by their owner only,
-- and run under user_memory_append, whose search_path is fixed; every name they use is in
-- pg_catalog (searched first anyway) or schema-qualified.

-- Exact equality of two JSON values, as domain/patching.py json_equal sees them once read back.
CREATE FUNCTION public.user_memory_json_equal(a jsonb, b jsonb) RETURNS boolean
LANGUAGE sql
IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT a = b
     AND (SELECT array_agg(strpos(v::text, '.') > 0)
            FROM jsonb_path_query(a, 'strict $.** ? (@.type() == "number")') v)
         IS NOT DISTINCT FROM
         (SELECT array_agg(strpos(v::text, '.') > 0)
            FROM jsonb_path_query(b, 'strict $.** ? (@.type() == "number")') v)
$$;

-- The tokens of a JSON Pointer, unescaped; refuses what is not a pointer and what is over bounds.
CREATE FUNCTION public.user_memory_json_pointer(p_pointer jsonb, p_op integer, p_member text) RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  pointer text;
  tokens text[];
BEGIN
  IF p_pointer IS NULL THEN
    RAISE EXCEPTION 'operation % is missing %', p_op, quote_literal(p_member) USING ERRCODE = 'UMP01';
  END IF;
  IF jsonb_typeof(p_pointer) <> 'string' THEN
    RAISE EXCEPTION 'operation %: JSON Pointer % must be a string, got %', p_op, quote_literal(p_member),
      jsonb_typeof(p_pointer) USING ERRCODE = 'UMP01';
  END IF;
  pointer := p_pointer #>> '{}';
  IF pointer = '' THEN
    RETURN '{}';
  END IF;
  IF octet_length(pointer) > 2048 THEN
    RAISE EXCEPTION 'operation %: JSON Pointer % is % bytes, over the limit of 2048', p_op, quote_literal(p_member),
      octet_length(pointer) USING ERRCODE = 'UMP02';
  END IF;
  IF left(pointer, 1) <> '/' THEN
    RAISE EXCEPTION 'operation %: JSON Pointer % must be empty or start with ''/''', p_op, quote_literal(p_member)
      USING ERRCODE = 'UMP01';
  END IF;
  IF pointer ~ '~([^01]|$)' THEN
    RAISE EXCEPTION 'operation %: JSON Pointer % has an invalid escape', p_op, quote_literal(p_member)
      USING ERRCODE = 'UMP01';
  END IF;
  -- string_to_array('', '/') is an empty array, but '/' points to the member named ''
  tokens := CASE WHEN pointer = '/' THEN ARRAY[''] ELSE string_to_array(substr(pointer, 2), '/') END;
  IF cardinality(tokens) > 100 THEN
    RAISE EXCEPTION 'operation %: JSON Pointer % has % tokens, over the limit of 100', p_op, quote_literal(p_member),
      cardinality(tokens) USING ERRCODE = 'UMP02';
  END IF;
  IF strpos(pointer, '~') > 0 THEN  -- ~1 first, then ~0 (RFC 6901: '~01' is '~1', not '/')
    SELECT array_agg(replace(replace(t, '~1', '/'), '~0', '~') ORDER BY i) INTO tokens
      FROM unnest(tokens) WITH ORDINALITY AS u(t, i);
  END IF;
  RETURN tokens;
END
$$;

-- The value at tokens[1:p_depth] of p_doc (NULL p_depth: the whole pointer), every step checked:
-- a member that exists, an array index in range and written without leading zeros or a sign.
CREATE FUNCTION public.user_memory_json_walk(p_doc jsonb, p_tokens text[], p_depth integer, p_op integer)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  node jsonb := p_doc;
  token text;
  kind text;
BEGIN
  FOR i IN 1 .. coalesce(p_depth, cardinality(p_tokens)) LOOP
    token := p_tokens[i];
    kind := jsonb_typeof(node);
    IF kind = 'object' THEN
      IF NOT node ? token THEN
        RAISE EXCEPTION 'operation %: token % of the pointer names a member that does not exist', p_op, i
          USING ERRCODE = 'UMP01';
      END IF;
      node := node -> token;
    ELSIF kind = 'array' THEN
      IF token !~ '^(0|[1-9][0-9]{0,8})$' THEN
        RAISE EXCEPTION 'operation %: token % of the pointer is not a valid array index', p_op, i
          USING ERRCODE = 'UMP01';
      END IF;
      IF token::integer >= jsonb_array_length(node) THEN
        RAISE EXCEPTION 'operation %: index % is out of range for an array of %', p_op, token, jsonb_array_length(node)
          USING ERRCODE = 'UMP01';
      END IF;
      node := node -> token::integer;
    ELSE
      RAISE EXCEPTION 'operation %: cannot descend into a %', p_op, kind USING ERRCODE = 'UMP01';
    END IF;
  END LOOP;
  RETURN node;
END
$$;

-- p_max_bytes bounds the document along the way (the final size is the caller's to check): an add
-- that doubles it every operation cannot make 1,000 operations cost more than a few large ones.
CREATE FUNCTION public.user_memory_apply_patch(p_doc jsonb, p_patch jsonb, p_max_bytes integer DEFAULT 1048576)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  doc jsonb := p_doc;
  op jsonb;
  kind text;
  tokens text[];
  from_tokens text[];
  removed text[];
  value jsonb;
  found jsonb;
  last text;
  depth integer;
  size integer;
  index integer;
  n integer := 0;
  -- A token PostgreSQL's own path operators (#>, jsonb_set) would read as an array index although
  -- RFC 6901 does not (' 1', '+1', '-1', '01'): a pointer with one is walked step by step, and so
  -- is a pointer the fast lookup does not find (for the exact error).
  lenient constant text := '/([[:space:]]|[+-][0-9]|0[0-9])';
  exact boolean;
  pointer text;
BEGIN
  IF jsonb_typeof(p_patch) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'a patch must be a JSON array of operations, got %', coalesce(jsonb_typeof(p_patch), 'NULL')
      USING ERRCODE = 'UMP01';
  END IF;
  IF jsonb_array_length(p_patch) > 1000 THEN
    RAISE EXCEPTION 'the patch has % operations, over the limit of 1000', jsonb_array_length(p_patch)
      USING ERRCODE = 'UMP02';
  END IF;
  FOR op IN SELECT e FROM jsonb_array_elements(p_patch) e LOOP
    IF jsonb_typeof(op) <> 'object' THEN
      RAISE EXCEPTION 'operation % must be an object, got %', n, jsonb_typeof(op) USING ERRCODE = 'UMP01';
    END IF;
    kind := CASE WHEN jsonb_typeof(op -> 'op') = 'string' THEN op ->> 'op' END;
    IF kind IS NULL OR kind NOT IN ('add', 'remove', 'replace', 'move', 'copy', 'test') THEN
      RAISE EXCEPTION 'operation % has an unknown op', n USING ERRCODE = 'UMP01';
    END IF;
    -- A pointer without escapes, within the bounds, is split here (most are: a call per pointer to
    -- the helper cost a quarter of a small patch's time); any other goes to the helper.
    pointer := CASE WHEN jsonb_typeof(op -> 'path') = 'string' THEN op ->> 'path' END;
    IF pointer ~ '^(/[^/~]*)+$' AND octet_length(pointer) <= 2048 AND length(pointer) - length(replace(pointer, '/', '')) <= 100 THEN
      tokens := CASE WHEN pointer = '/' THEN ARRAY[''] ELSE string_to_array(substr(pointer, 2), '/') END;
    ELSE
      tokens := public.user_memory_json_pointer(op -> 'path', n, 'path');
    END IF;
    exact := pointer !~ lenient;
    IF kind IN ('add', 'replace', 'test') THEN
      value := op -> 'value';
      IF value IS NULL THEN
        RAISE EXCEPTION 'operation % (%) is missing ''value''', n, kind USING ERRCODE = 'UMP01';
      END IF;
    ELSIF kind IN ('move', 'copy') THEN
      from_tokens := public.user_memory_json_pointer(op -> 'from', n, 'from');
      IF kind = 'move' AND from_tokens = tokens THEN  -- a no-op, once the value is known to exist
        IF NOT exact OR doc #> tokens IS NULL THEN
          PERFORM public.user_memory_json_walk(doc, tokens, NULL, n);
        END IF;
        n := n + 1;
        CONTINUE;
      END IF;
      IF kind = 'move' AND tokens[1:cardinality(from_tokens)] = from_tokens THEN
        RAISE EXCEPTION 'operation %: cannot move a value into its own child', n USING ERRCODE = 'UMP01';
      END IF;
    END IF;

    IF kind IN ('test', 'replace') THEN
      found := CASE WHEN exact THEN doc #> tokens END;
      IF found IS NULL THEN
        found := public.user_memory_json_walk(doc, tokens, NULL, n);
      END IF;
      IF kind = 'test' THEN
        IF NOT public.user_memory_json_equal(found, value) THEN
          RAISE EXCEPTION 'operation %: test failed', n USING ERRCODE = 'UMP01';
        END IF;
      ELSE
        doc := CASE WHEN cardinality(tokens) = 0 THEN value ELSE jsonb_set(doc, tokens, value, false) END;
      END IF;
    ELSIF kind = 'copy' THEN
      value := CASE WHEN (op ->> 'from') !~ lenient THEN doc #> from_tokens END;
      IF value IS NULL THEN
        value := public.user_memory_json_walk(doc, from_tokens, NULL, n);
      END IF;
    END IF;

    -- remove: the whole operation; move: its first half (the value leaves `from`)
    IF kind IN ('remove', 'move') THEN
      removed := CASE WHEN kind = 'move' THEN from_tokens ELSE tokens END;
      depth := cardinality(removed);
      IF depth = 0 THEN
        RAISE EXCEPTION 'operation %: cannot remove the whole document', n USING ERRCODE = 'UMP01';
      END IF;
      found := CASE WHEN (CASE WHEN kind = 'move' THEN op ->> 'from' ELSE op ->> 'path' END) !~ lenient
                    THEN doc #> removed[1:depth - 1] END;
      IF found IS NULL THEN
        found := public.user_memory_json_walk(doc, removed, depth - 1, n);
      END IF;
      last := removed[depth];
      IF jsonb_typeof(found) = 'object' THEN
        IF NOT found ? last THEN
          RAISE EXCEPTION 'operation %: token % of the pointer names a member that does not exist', n, depth
            USING ERRCODE = 'UMP01';
        END IF;
        value := found -> last;
      ELSIF jsonb_typeof(found) = 'array' THEN
        IF last !~ '^(0|[1-9][0-9]{0,8})$' THEN
          RAISE EXCEPTION 'operation %: token % of the pointer is not a valid array index', n, depth
            USING ERRCODE = 'UMP01';
        END IF;
        IF last::integer >= jsonb_array_length(found) THEN
          RAISE EXCEPTION 'operation %: index % is out of range for an array of %', n, last, jsonb_array_length(found)
            USING ERRCODE = 'UMP01';
        END IF;
        value := found -> last::integer;
      ELSE
        RAISE EXCEPTION 'operation %: the parent is a %, not a container', n, jsonb_typeof(found)
          USING ERRCODE = 'UMP01';
      END IF;
      doc := doc #- removed;
    END IF;

    -- add: the whole operation; move and copy: their second half
    IF kind IN ('add', 'move', 'copy') THEN
      depth := cardinality(tokens);
      IF depth = 0 THEN
        doc := value;
      ELSE
        found := CASE WHEN exact THEN doc #> tokens[1:depth - 1] END;
        IF found IS NULL THEN
          found := public.user_memory_json_walk(doc, tokens, depth - 1, n);
        END IF;
        last := tokens[depth];
        IF jsonb_typeof(found) = 'object' THEN
          doc := jsonb_set(doc, tokens, value, true);
        ELSIF jsonb_typeof(found) = 'array' THEN
          size := jsonb_array_length(found);
          IF last = '-' THEN
            index := size;
          ELSIF last !~ '^(0|[1-9][0-9]{0,8})$' THEN
            RAISE EXCEPTION 'operation %: token % of the pointer is not a valid array index', n, depth
              USING ERRCODE = 'UMP01';
          ELSE
            index := last::integer;
          END IF;
          IF index > size THEN
            RAISE EXCEPTION 'operation %: index % is out of range for an array of %', n, index, size
              USING ERRCODE = 'UMP01';
          END IF;
          tokens[depth] := index::text;
          doc := CASE WHEN index = size THEN jsonb_set(doc, tokens, value, true)
                      ELSE jsonb_insert(doc, tokens, value, false) END;
        ELSE
          RAISE EXCEPTION 'operation %: the parent is a %, not a container', n, jsonb_typeof(found)
            USING ERRCODE = 'UMP01';
        END IF;
      END IF;
      IF pg_column_size(doc) > p_max_bytes THEN
        RAISE EXCEPTION 'operation %: the document grows over % bytes', n, p_max_bytes USING ERRCODE = 'UMP02';
      END IF;
    END IF;
    n := n + 1;
  END LOOP;
  RETURN doc;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_json_equal(jsonb, jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_json_pointer(jsonb, integer, text) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_json_walk(jsonb, text[], integer, integer)
  FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_apply_patch(jsonb, jsonb, integer)
  FROM PUBLIC, anon, authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- A version row is keyed by (user_id, version)
-- ---------------------------------------------------------------------------------------------

-- The seed's `id uuid DEFAULT gen_random_uuid()` primary key was never read: every lookup is by
-- (user_id, version), which the unique index already keeps. A random key's index takes each
-- version at a random place (about 90 bytes of WAL and 40 bytes of index a version, measured with
-- bench/bench_store.py --compare-eventsourcing --wal-by-relation); the unique index becomes the
-- primary key under its own name.
ALTER TABLE user_memory_snapshots DROP CONSTRAINT user_memory_snapshots_pkey;
ALTER TABLE user_memory_snapshots DROP COLUMN id;
ALTER TABLE user_memory_snapshots
  ADD CONSTRAINT idx_user_memory_snapshots_user_version PRIMARY KEY USING INDEX idx_user_memory_snapshots_user_version;

-- "The version as of a time" without an index of every row's time. user_memory_append now stamps
-- a version no earlier than the one before it (a clock that steps back cannot reorder a user's
-- history), so a user's created_at grows with version: the answer lies between the last checkpoint
-- at or before the time and the next one. The checkpoints' index carries created_at for that
-- (an index-only walk over a user's checkpoints), and the rows between two checkpoints are found
-- by the primary key. The (user_id, created_at) index of every row goes: 57 bytes of history and
-- 104 bytes of WAL a version (bench/bench_history.py, bench/bench_store.py).
DROP INDEX idx_user_memory_snapshots_checkpoints;
CREATE INDEX idx_user_memory_snapshots_checkpoints
  ON user_memory_snapshots (user_id, version) INCLUDE (created_at) WHERE is_full_snapshot = TRUE;
DROP INDEX idx_user_memory_snapshots_user_created_at;

-- Idempotency keys: found through a hash index of "<user id> <key>" (about 20 bytes an entry)
-- instead of a unique b-tree of (user_id, key) (88 bytes an entry measured: every agent tool call
-- and API request with an Idempotency-Key has one). Uniqueness never rested on that index alone:
-- user_memory_append looks a key up only after it holds the user's head row, so two writes of one
-- key are serialized there, and two first writes of a new user collide on the primary key
-- (user_id, version 1). The lookups name the index's expression (user_memory_append, and
-- adapters/postgres.py), and then the key itself.
DROP INDEX idx_user_memory_snapshots_user_idempotency_key;
CREATE INDEX idx_user_memory_snapshots_user_idempotency_key
  ON user_memory_snapshots USING hash ((user_id::text || ' ' || idempotency_key)) WHERE idempotency_key IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- user_memory_append: 012's function; an end user's patch is applied, not trusted
-- ---------------------------------------------------------------------------------------------

-- Same signature, arguments and checks as 012 (CREATE OR REPLACE keeps its grants), except:
--   * p_document may be NULL: the document is then p_patch applied to the head (every caller);
--   * an end user's patch is always applied to the head; a p_document that is not its result is
--     refused (UMP03), and the result is stored;
--   * an end user's p_checkpoint is honoured, bounded: at 200 versions since the last checkpoint
--     the version is made one;
--   * p_patch is at most twice the document limit (pg_column_size), for every caller (22023);
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
  ts timestamptz := clock_timestamp();
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  max_bytes := coalesce((SELECT s.value::integer FROM public.user_memory_settings s WHERE s.name = 'max_document_bytes'),
                        524288);
  IF NOT (pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE')) THEN
    end_user := true;
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
