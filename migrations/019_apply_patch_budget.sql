-- The database's RFC 6902 applier keeps a running budget: a write that would take the working
-- document past p_max_bytes is refused before it is built.
--
-- user_memory_apply_patch (migration 015) measured the document after each add, move and copy:
-- a copy of the whole document into a new member was built (twice the document, in memory) and
-- only then refused, and `replace` was never measured. Now every write (add, replace, the second
-- half of move and copy) adds the size of its value to the size of the working document it goes
-- into (jsonb's own bytes: pg_column_size, constant time on a value in memory) and is refused
-- with UMP02 before jsonb_set runs when that is over p_max_bytes (user_memory_append passes twice
-- the document limit); a write to the root counts only its value. The working document is also
-- nested at most 512 levels, kept as the service keeps it (user_memory_json_nesting below): a
-- value added, replaced with or copied with an item at level 255 is refused, and a move deeper
-- adds the levels its new place adds (12 KB of adds and moves, each moving a chain into the next
-- one's tail, stored a document of 1,100 levels that the service could not read back). Both are
-- UMP02, as the bounds at the door, which are unchanged (1,000 operations, pointers of 2,048
-- bytes and 100 tokens). The size refusal's message is unchanged too ('operation N: the document
-- grows over M bytes'): the service reads it as a 413 (adapters/postgres.py).
--
-- Expand-only: the signature, owner and privileges are unchanged (CREATE OR REPLACE keeps them:
-- the owner only; user_memory_append calls it as its owner), so the previous release's code,
-- which reads UMP02 as a refused patch, works against it unchanged. The new helper is, like the
-- applier's others, the owner's only.

-- The nesting bound once `p_value` is placed at a depth of `p_depth` tokens: a value with an item at
-- level 255 is refused (the depth the service's measure, pydantic-core's JSON, writes), and so is a
-- document that would be nested more than 512 levels (the service reads, encodes and compares
-- documents recursively). A jsonpath scan of the value: what its jsonb_set costs anyway.
CREATE FUNCTION public.user_memory_json_nesting(p_nesting integer, p_value jsonb, p_depth integer, p_op integer)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
  IF jsonb_typeof(p_value) IN ('object', 'array') AND jsonb_path_exists(p_value, 'strict $.**{255}') THEN
    RAISE EXCEPTION 'operation %: the value is nested more than 255 levels deep', p_op USING ERRCODE = 'UMP02';
  END IF;
  IF p_depth + 255 > 512 THEN  -- not reached (pointers have at most 100 tokens), kept for the bound
    RAISE EXCEPTION 'operation %: the patch would nest the document more than 512 levels deep', p_op
      USING ERRCODE = 'UMP02';
  END IF;
  RETURN greatest(p_nesting, p_depth + 255);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_json_nesting(integer, jsonb, integer, integer)
  FROM PUBLIC, anon, authenticated, service_role;

CREATE OR REPLACE FUNCTION public.user_memory_apply_patch(p_doc jsonb, p_patch jsonb, p_max_bytes integer DEFAULT 1048576)
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
  -- The working document's bytes (jsonb's own, pg_column_size: O(1) on a value in memory); a
  -- head read from the table may still be compressed, so the first write measures it again.
  doc_bytes integer := pg_column_size(p_doc);
  -- An upper bound of the working document's nesting, as the service keeps it: a value measured is
  -- nested at most 255 levels, a document that is not gets no deeper, a place adds its depth.
  nesting integer := CASE WHEN jsonb_path_exists(p_doc, 'strict $.**{255}') THEN 512 ELSE 255 END;
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
        nesting := public.user_memory_json_nesting(nesting, value, cardinality(tokens), n);
        IF (CASE WHEN cardinality(tokens) = 0 THEN 0 ELSE doc_bytes END) + pg_column_size(value) > p_max_bytes THEN
          RAISE EXCEPTION 'operation %: the document grows over % bytes', n, p_max_bytes USING ERRCODE = 'UMP02';
        END IF;
        doc := CASE WHEN cardinality(tokens) = 0 THEN value ELSE jsonb_set(doc, tokens, value, false) END;
        doc_bytes := pg_column_size(doc);
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
      doc_bytes := pg_column_size(doc);
    END IF;

    -- add: the whole operation; move and copy: their second half
    IF kind IN ('add', 'move', 'copy') THEN
      depth := cardinality(tokens);
      -- Refused before the new document is built: a copy that doubles it is never made, a move
      -- nests its value deeper by as many levels as its new place is deeper.
      IF kind = 'move' THEN
        IF depth > cardinality(from_tokens) THEN
          nesting := nesting + depth - cardinality(from_tokens);
          IF nesting > 512 THEN
            RAISE EXCEPTION 'operation %: the patch would nest the document more than 512 levels deep', n
              USING ERRCODE = 'UMP02';
          END IF;
        END IF;
      ELSE
        nesting := public.user_memory_json_nesting(nesting, value, depth, n);
      END IF;
      IF (CASE WHEN depth = 0 THEN 0 ELSE doc_bytes END) + pg_column_size(value) > p_max_bytes THEN
        RAISE EXCEPTION 'operation %: the document grows over % bytes', n, p_max_bytes USING ERRCODE = 'UMP02';
      END IF;
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
      doc_bytes := pg_column_size(doc);
      IF doc_bytes > p_max_bytes THEN
        RAISE EXCEPTION 'operation %: the document grows over % bytes', n, p_max_bytes USING ERRCODE = 'UMP02';
      END IF;
    END IF;
    n := n + 1;
  END LOOP;
  RETURN doc;
END
$$;
