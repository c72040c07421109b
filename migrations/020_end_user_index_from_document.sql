-- An end user's search index is derived from its stored document, by the database.
--
-- Until now user_memory_append wrote whatever item rows (p_items) its caller sent, and the
-- service's were right because the service computed them (domain/companion/items.py). An end user
-- calling the function directly (Supabase's Data API as `authenticated`) could send anything: a
-- 2-byte document with megabytes of rows, an open to-do that is in no document (which put the user
-- into the nightly fan-out's list of users with open elements), or leave out the removals so rows
-- at paths the document no longer has stayed forever.
--
-- Now, for an end user (not the service; the API's requests are end users too), the rows of the
-- version's touched sections are computed here from the stored result document, by the same rules
-- as items.py (user_memory_index_items below: kinds leaf, goal, todo, event, part, entry; text
-- without sensitive or bookkeeping fields, at most 4,000 characters; values without sensitive
-- fields; status, due_at, starts_at, ends_at and recurring from the element):
--   * the rows sent are not written: a path the document does not hold gets no row, and a row's
--     text, value, status and times are the document's, whatever was sent;
--   * every row under a touched section that the result does not hold is removed, whether or
--     not the caller listed it (so no row outlives its path);
--   * an unchanged row keeps its version (as the service's diff does);
--   * recur_until alone is taken from the row sent for the path (or kept from the row before):
--     it needs the recurrence rules expanded (recurrence.py), which only the service does. It
--     only narrows which of the user's own events its own range queries consider (queries expand
--     the stored value again; the fan-out reads `recurring`, which is derived), and it is kept
--     within the years 1900-2999, or NULL (recurs for ever) when it is not a time;
--   * the user's rows are bounded: at most max_index_items rows and max_index_bytes bytes (text
--     and value, pg_column_size) per user, rows of user_memory_settings. A write over them is
--     refused (22023) before any row is written, and the walk stops as soon as it passes
--     max_index_items (a document of 100,000 one-character strings is refused in a fraction of a
--     second instead of being walked, and indexed, whole).
-- Without p_items (a writer that sends none) the index is left behind, as before, and
-- user_memory_reindex (the service) rebuilds it from the document.
--
-- The service's calls are unchanged (its items are the ones it diffed; not recomputed, so its
-- write costs what it did: bench/bench_store.py).
--
-- Who may do what: unchanged. The new functions are the owner's only (the SECURITY DEFINER append
-- calls them as their owner); nobody else may execute them. Like 015's applier they have no SET
-- clause and name only pg_catalog's or schema-qualified objects.

INSERT INTO public.user_memory_settings (name, value) VALUES
  ('max_index_items', '20000'),
  ('max_index_bytes', '4194304')
ON CONFLICT (name) DO NOTHING;

-- ---------------------------------------------------------------------------------------------
-- items.py in SQL: the items of a document (or of the sections a patch touched)
-- ---------------------------------------------------------------------------------------------

-- Python's str.strip(): every character str.isspace() is true for, from both ends.
CREATE FUNCTION public.user_memory_index_strip(p_text text) RETURNS text
LANGUAGE sql
IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT pg_catalog.btrim(p_text, U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020\0085\00A0\1680\2000\2001\2002\2003\2004\2005\2006\2007\2008\2009\200A\2028\2029\202F\205F\3000')
$$;

-- A JSON value's truth as Python's: null, false, 0, "", [] and {} are false.
CREATE FUNCTION public.user_memory_index_truthy(p_value jsonb) RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
  SELECT coalesce(CASE pg_catalog.jsonb_typeof(p_value)
                    WHEN 'boolean' THEN p_value = 'true'::jsonb
                    WHEN 'number' THEN (p_value #>> '{}')::numeric <> 0
                    WHEN 'string' THEN p_value <> '""'::jsonb
                    WHEN 'array' THEN pg_catalog.jsonb_array_length(p_value) > 0
                    WHEN 'object' THEN p_value <> '{}'::jsonb
                  END, false)
$$;

-- domain/companion/times.py parse_when: a date (that day's start, UTC) or an RFC 3339 date-time
-- with an offset, in [1900, 3000) UTC; NULL where parse_when raises. Parsed by hand: PostgreSQL's
-- own input reads far more (`today`, `epoch`, a 60th second) than the service does.
CREATE FUNCTION public.user_memory_index_when(p_value jsonb) RETURNS timestamptz
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  t text;
  body text;
  zone text;
  y integer;
  mo integer;
  d integer;
  offset_minutes integer := 0;
  utc timestamp;
BEGIN
  IF pg_catalog.jsonb_typeof(p_value) IS DISTINCT FROM 'string' THEN
    RETURN NULL;
  END IF;
  t := p_value #>> '{}';
  -- Matched without capturing groups (a match that captures costs a hundred times more), then
  -- read by position.
  IF t !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2}))?$' THEN
    RETURN NULL;
  END IF;
  y := pg_catalog.substr(t, 1, 4)::integer;
  mo := pg_catalog.substr(t, 6, 2)::integer;
  d := pg_catalog.substr(t, 9, 2)::integer;
  IF y < 1 OR mo NOT BETWEEN 1 AND 12 OR d < 1
     OR d > pg_catalog.date_part('day', pg_catalog.make_date(y, mo, 1) + interval '1 month' - interval '1 day') THEN
    RETURN NULL;
  END IF;
  IF pg_catalog.length(t) = 10 THEN
    utc := pg_catalog.make_timestamp(y, mo, d, 0, 0, 0);
  ELSE
    zone := CASE WHEN pg_catalog.right(t, 1) = 'Z' THEN 'Z' ELSE pg_catalog.right(t, 6) END;
    body := pg_catalog.left(t, pg_catalog.length(t) - pg_catalog.length(zone));  -- YYYY-MM-DDTHH:MM[:SS[.f]]
    IF pg_catalog.substr(body, 12, 2)::integer > 23 OR pg_catalog.substr(body, 15, 2)::integer > 59
       OR coalesce(nullif(pg_catalog.substr(body, 18, 2), '')::integer, 0) > 59 THEN
      RETURN NULL;
    END IF;
    -- Python reads an offset's minutes past 59 as more hours (+05:60 is +06:00); check_time then
    -- allows at most 15:59 either way.
    IF zone <> 'Z' THEN
      offset_minutes := pg_catalog.substr(zone, 2, 2)::integer * 60 + pg_catalog.substr(zone, 5, 2)::integer;
      IF offset_minutes > 959 THEN
        RETURN NULL;
      END IF;
      IF pg_catalog.left(zone, 1) = '-' THEN
        offset_minutes := -offset_minutes;
      END IF;
    END IF;
    utc := (pg_catalog.left(body, 10) || ' ' || pg_catalog.substr(body, 12, 5) || ':'
            || coalesce(nullif(pg_catalog.substr(body, 18), ''), '00'))::timestamp
           - pg_catalog.make_interval(mins => offset_minutes);
  END IF;
  IF utc < '1900-01-01'::timestamp OR utc >= '3000-01-01'::timestamp THEN
    RETURN NULL;
  END IF;
  RETURN utc AT TIME ZONE 'UTC';
END
$$;

-- A recur_until sent by the caller: a time within [1900, 3000), else NULL (recurs for ever). Stable,
-- not immutable: a time without an offset is read on the session's clock.
CREATE FUNCTION public.user_memory_index_until(p_value jsonb) RETURNS timestamptz
LANGUAGE plpgsql
STABLE PARALLEL SAFE
AS $$
DECLARE
  t timestamptz;
BEGIN
  IF pg_catalog.jsonb_typeof(p_value) IS DISTINCT FROM 'string'
     OR (p_value #>> '{}') !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?(Z|[+-][0-9]{2}(:?[0-9]{2}(:?[0-9]{2})?)?)?$' THEN
    RETURN NULL;
  END IF;
  BEGIN
    t := (p_value #>> '{}')::timestamptz;
  EXCEPTION WHEN OTHERS THEN  -- a date the calendar does not have
    RETURN NULL;
  END;
  IF t < '1900-01-01 00:00:00+00'::timestamptz OR t >= '3000-01-01 00:00:00+00'::timestamptz THEN
    RETURN NULL;
  END IF;
  RETURN t;
END
$$;

-- items.py redacted: the value without its sensitive fields, at any depth.
CREATE FUNCTION public.user_memory_index_redacted(p_value jsonb) RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
  IF pg_catalog.jsonb_typeof(p_value) = 'object' THEN
    RETURN coalesce((SELECT pg_catalog.jsonb_object_agg(e.key, public.user_memory_index_redacted(e.value))
                       FROM pg_catalog.jsonb_each(p_value) e
                      WHERE e.key NOT IN ('date_of_birth', 'email', 'phone')), '{}'::jsonb);
  ELSIF pg_catalog.jsonb_typeof(p_value) = 'array' THEN
    RETURN coalesce((SELECT pg_catalog.jsonb_agg(public.user_memory_index_redacted(a.value) ORDER BY a.n)
                       FROM pg_catalog.jsonb_array_elements(p_value) WITH ORDINALITY AS a(value, n)), '[]'::jsonb);
  END IF;
  RETURN p_value;
END
$$;

-- items.py _words: the searchable strings inside a value, in order (an object's keys sorted by
-- code point, as Python's sorted(); "C" compares UTF-8 bytes, which sorts the same), sensitive,
-- bookkeeping and non-text keys left out.
CREATE FUNCTION public.user_memory_index_words(p_value jsonb, p_key text) RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  words text[] := '{}';
  e record;
  s text;
BEGIN
  IF p_key IS NOT NULL AND p_key = ANY (ARRAY[
       'version', 'last_updated_by', 'schema_version', 'recency_score', 'influence_score', 'last_updated',
       'last_modified', 'last_summarized_at', 'completed_at', 'id', 'response_status',
       'date_of_birth', 'email', 'phone',
       'status', 'priority', 'size', 'start', 'end', 'due_date', 'target_date', 'recurrence', 'source', 'at',
       'percent', 'parent_id', 'goal_id', 'first_noted', 'last_noted', 'severity']) THEN
    RETURN words;
  END IF;
  CASE pg_catalog.jsonb_typeof(p_value)
    WHEN 'string' THEN
      s := public.user_memory_index_strip(p_value #>> '{}');
      IF s <> '' THEN
        words := ARRAY[s];
      END IF;
    WHEN 'object' THEN
      FOR e IN SELECT x.key, x.value FROM pg_catalog.jsonb_each(p_value) x ORDER BY x.key COLLATE "C" LOOP
        words := words || public.user_memory_index_words(e.value, e.key);
      END LOOP;
    WHEN 'array' THEN
      FOR e IN SELECT x.value FROM pg_catalog.jsonb_array_elements(p_value) WITH ORDINALITY AS x(value, n) ORDER BY x.n LOOP
        words := words || public.user_memory_index_words(e.value, p_key);
      END LOOP;
    ELSE
      NULL;
  END CASE;
  RETURN words;
END
$$;

-- items.py _element: one element's row (a goal, to-do, event, part, or an object in a list).
CREATE FUNCTION public.user_memory_index_element(p_path text, p_kind text, p_value jsonb)
RETURNS TABLE (item_path text, item_kind text, item_text text, item_value jsonb, item_status text,
               item_due_at timestamptz, item_starts_at timestamptz, item_ends_at timestamptz, item_recurring boolean)
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  fields text[] := CASE p_kind
                     WHEN 'goal' THEN ARRAY['title', 'description', 'category', 'progress']
                     WHEN 'todo' THEN ARRAY['text', 'category', 'tags', 'notes']
                     WHEN 'event' THEN ARRAY['summary', 'description', 'location', 'attendees']
                     WHEN 'part' THEN ARRAY['name', 'goals']
                   END;
  words text[] := '{}';
  name text;
  field jsonb;
  word text;
  rules jsonb;
BEGIN
  item_path := p_path;
  item_kind := p_kind;
  item_recurring := false;
  IF fields IS NOT NULL AND pg_catalog.jsonb_typeof(p_value) = 'object' THEN
    FOREACH name IN ARRAY fields LOOP
      field := p_value -> name;
      IF pg_catalog.jsonb_typeof(field) = 'string' THEN  -- most are: no call for them
        word := public.user_memory_index_strip(field #>> '{}');
        IF word <> '' THEN
          words := words || word;
        END IF;
      ELSIF pg_catalog.jsonb_typeof(field) IN ('object', 'array') THEN
        words := words || public.user_memory_index_words(field, name);
      END IF;
    END LOOP;
  ELSE
    words := public.user_memory_index_words(p_value, NULL);
  END IF;
  item_text := pg_catalog.left(p_kind || ': ' || pg_catalog.array_to_string(words, ' · '), 4000);
  item_value := p_value;
  IF pg_catalog.jsonb_typeof(p_value) = 'object' THEN
    item_status := CASE WHEN pg_catalog.jsonb_typeof(p_value -> 'status') = 'string' THEN p_value ->> 'status' END;
    -- As items.py: a time that does not parse leaves its column (and, for an event, the ones after
    -- it) empty.
    IF p_kind = 'todo' AND public.user_memory_index_truthy(p_value -> 'due_date') THEN
      item_due_at := public.user_memory_index_when(p_value -> 'due_date');
    ELSIF p_kind = 'goal' AND public.user_memory_index_truthy(p_value -> 'target_date') THEN
      item_due_at := public.user_memory_index_when(p_value -> 'target_date');
    ELSIF p_kind = 'event' AND public.user_memory_index_truthy(p_value -> 'start') THEN
      item_starts_at := public.user_memory_index_when(p_value -> 'start');
      IF item_starts_at IS NOT NULL THEN
        IF public.user_memory_index_truthy(p_value -> 'end') THEN
          item_ends_at := public.user_memory_index_when(p_value -> 'end');
        ELSE
          item_ends_at := item_starts_at;
        END IF;
        rules := p_value -> 'recurrence';
        IF item_ends_at IS NOT NULL AND public.user_memory_index_truthy(rules) THEN
          -- Python iterates the value and keeps its strings: a string's characters, an object's
          -- keys, an array's strings; a number or true cannot be iterated (no rules).
          item_recurring := CASE pg_catalog.jsonb_typeof(rules)
                              WHEN 'string' THEN true
                              WHEN 'object' THEN true
                              WHEN 'array' THEN pg_catalog.jsonb_path_exists(rules, 'strict $[*] ? (@.type() == "string")')
                              ELSE false
                            END;
        END IF;
      END IF;
    END IF;
    IF p_kind NOT IN ('goal', 'todo', 'event') THEN
      item_value := item_value - ARRAY['version', 'last_updated_by', 'schema_version', 'recency_score', 'influence_score',
                                       'last_updated', 'last_modified', 'last_summarized_at', 'completed_at', 'id',
                                       'response_status'];
    END IF;
  END IF;
  IF pg_catalog.jsonb_typeof(item_value) IN ('object', 'array')
     AND (item_value)::text ~ '"(?:date_of_birth|email|phone)":' THEN
    item_value := public.user_memory_index_redacted(item_value);
  END IF;
  RETURN NEXT;
END
$$;

-- items.py _walk: the items under one value at p_path (p_key: the member it is under, or the
-- list's member for a list's values; p_depth: 1 for a top-level member). The strings of an object
-- or a list are taken in one query each (a call per value would cost a document of 100,000 short
-- strings seconds); p_limit: more items than this under the value is refused (22023) as soon as
-- it is seen, before the rest is walked.
CREATE FUNCTION public.user_memory_index_walk(p_value jsonb, p_path text, p_key text, p_depth integer, p_limit bigint)
RETURNS TABLE (item_path text, item_kind text, item_text text, item_value jsonb, item_status text,
               item_due_at timestamptz, item_starts_at timestamptz, item_ends_at timestamptz, item_recurring boolean)
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  e record;
  s text;
  kind text := pg_catalog.jsonb_typeof(p_value);
  found bigint := 0;
  added bigint;
  hidden constant text[] := ARRAY[
    'version', 'last_updated_by', 'schema_version', 'recency_score', 'influence_score', 'last_updated',
    'last_modified', 'last_summarized_at', 'completed_at', 'id', 'response_status',
    'date_of_birth', 'email', 'phone'];
BEGIN
  IF p_key IS NOT NULL AND p_key = ANY (hidden) THEN
    RETURN;
  END IF;
  IF p_depth = 1 AND kind = 'object' AND p_key IN ('goals', 'todos', 'events', 'parts') THEN
    RETURN QUERY
      SELECT el.*
        FROM pg_catalog.jsonb_each(p_value) x,
             LATERAL public.user_memory_index_element(
               p_path || '/' || pg_catalog.replace(pg_catalog.replace(x.key, '~', '~0'), '/', '~1'),
               pg_catalog.rtrim(p_key, 's'), x.value) el
       WHERE pg_catalog.jsonb_typeof(x.value) <> 'null';
    GET DIAGNOSTICS found = ROW_COUNT;
  ELSIF kind = 'string' THEN
    s := public.user_memory_index_strip(p_value #>> '{}');
    IF s <> '' THEN
      item_path := p_path;
      item_kind := 'leaf';
      item_text := pg_catalog.left(pg_catalog.replace(coalesce(p_key, ''), '_', ' ') || ': ' || s, 4000);
      item_value := p_value;
      item_recurring := false;
      RETURN NEXT;
    END IF;
    RETURN;
  ELSIF kind = 'object' THEN
    RETURN QUERY
      SELECT l.path, 'leaf', pg_catalog.left(pg_catalog.replace(l.key, '_', ' ') || ': ' || l.words, 4000), l.value,
             NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, false
        FROM (SELECT p_path || '/' || pg_catalog.replace(pg_catalog.replace(x.key, '~', '~0'), '/', '~1') AS path,
                     x.key, x.value, public.user_memory_index_strip(x.value #>> '{}') AS words
                FROM pg_catalog.jsonb_each(p_value) x
               WHERE pg_catalog.jsonb_typeof(x.value) = 'string' AND NOT x.key = ANY (hidden)) l
       WHERE l.words <> '';
    GET DIAGNOSTICS found = ROW_COUNT;
    FOR e IN SELECT x.key, x.value FROM pg_catalog.jsonb_each(p_value) x
              WHERE pg_catalog.jsonb_typeof(x.value) IN ('object', 'array') LOOP
      IF found > p_limit THEN
        EXIT;
      END IF;
      RETURN QUERY SELECT * FROM public.user_memory_index_walk(
        e.value, p_path || '/' || pg_catalog.replace(pg_catalog.replace(e.key, '~', '~0'), '/', '~1'), e.key,
        p_depth + 1, p_limit - found);
      GET DIAGNOSTICS added = ROW_COUNT;
      found := found + added;
    END LOOP;
  ELSIF kind = 'array' THEN
    RETURN QUERY
      SELECT p_path || '/' || (x.n - 1), 'leaf',
             pg_catalog.left(pg_catalog.replace(coalesce(p_key, ''), '_', ' ') || ': ' || x.words, 4000), x.value,
             NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, false
        FROM (SELECT a.value, a.n, public.user_memory_index_strip(a.value #>> '{}') AS words
                FROM pg_catalog.jsonb_array_elements(p_value) WITH ORDINALITY AS a(value, n)
               WHERE pg_catalog.jsonb_typeof(a.value) = 'string') x
       WHERE x.words <> '';
    GET DIAGNOSTICS found = ROW_COUNT;
    IF found <= p_limit THEN
      RETURN QUERY
        SELECT el.*
          FROM pg_catalog.jsonb_array_elements(p_value) WITH ORDINALITY AS a(value, n),
               LATERAL public.user_memory_index_element(p_path || '/' || (a.n - 1), 'entry', a.value) el
         WHERE pg_catalog.jsonb_typeof(a.value) = 'object';
      GET DIAGNOSTICS added = ROW_COUNT;
      found := found + added;
    END IF;
    FOR e IN SELECT a.value, a.n - 1 AS i FROM pg_catalog.jsonb_array_elements(p_value) WITH ORDINALITY AS a(value, n)
              WHERE pg_catalog.jsonb_typeof(a.value) = 'array' LOOP
      IF found > p_limit THEN
        EXIT;
      END IF;
      RETURN QUERY SELECT * FROM public.user_memory_index_walk(e.value, p_path || '/' || e.i, p_key, p_depth + 1,
                                                               p_limit - found);
      GET DIAGNOSTICS added = ROW_COUNT;
      found := found + added;
    END LOOP;
  END IF;
  IF found > p_limit THEN
    RAISE EXCEPTION 'user_memory_append: the search index would hold more items than its limit'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$$;

-- items.py touched_sections: `/<collection>/<id>` inside an element map, else `/<member>`; NULL
-- for the whole document (a pointer to the root, or no operation at all).
CREATE FUNCTION public.user_memory_index_sections(p_patch jsonb) RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  sections text[] := '{}';
  pointer text;
  parts text[];
  section text;
BEGIN
  FOR pointer IN
    SELECT op ->> f.name
      FROM pg_catalog.jsonb_array_elements(p_patch) op, (VALUES ('path'), ('from')) f(name)
     WHERE pg_catalog.jsonb_typeof(op -> f.name) = 'string'
  LOOP
    IF pointer = '' THEN
      RETURN NULL;
    END IF;
    parts := pg_catalog.string_to_array(pointer, '/');
    section := '/' || parts[2];
    IF parts[2] IN ('goals', 'todos', 'events', 'parts') AND pg_catalog.cardinality(parts) > 2 THEN
      section := section || '/' || parts[3];
    END IF;
    IF NOT section = ANY (sections) THEN
      sections := sections || section;
    END IF;
  END LOOP;
  RETURN CASE WHEN pg_catalog.cardinality(sections) = 0 THEN NULL ELSE sections END;
END
$$;

-- items.py document_items: the document's items, only those in p_sections when given; pointers
-- over 1,000 bytes are left out (memory_items' bound). More than p_limit items is refused (22023).
CREATE FUNCTION public.user_memory_index_items(p_doc jsonb, p_sections text[], p_limit bigint)
RETURNS TABLE (item_path text, item_kind text, item_text text, item_value jsonb, item_status text,
               item_due_at timestamptz, item_starts_at timestamptz, item_ends_at timestamptz, item_recurring boolean)
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
  e record;
  top text;
  wanted text[];
  found bigint := 0;
  added bigint;
BEGIN
  FOR e IN SELECT x.key, x.value FROM pg_catalog.jsonb_each(p_doc) x LOOP
    top := '/' || pg_catalog.replace(pg_catalog.replace(e.key, '~', '~0'), '/', '~1');
    IF p_sections IS NOT NULL AND NOT top = ANY (p_sections) THEN
      wanted := ARRAY(SELECT s FROM pg_catalog.unnest(p_sections) s WHERE pg_catalog.left(s, pg_catalog.length(top) + 1) = top || '/');
      IF pg_catalog.cardinality(wanted) = 0 THEN
        CONTINUE;
      END IF;
      IF e.key IN ('goals', 'todos', 'events', 'parts') AND pg_catalog.jsonb_typeof(e.value) = 'object' THEN
        RETURN QUERY
          SELECT el.*
            FROM pg_catalog.jsonb_each(e.value) x,
                 LATERAL public.user_memory_index_element(
                   top || '/' || pg_catalog.replace(pg_catalog.replace(x.key, '~', '~0'), '/', '~1'),
                   pg_catalog.rtrim(e.key, 's'), x.value) el
           WHERE pg_catalog.jsonb_typeof(x.value) <> 'null'
             AND top || '/' || pg_catalog.replace(pg_catalog.replace(x.key, '~', '~0'), '/', '~1') = ANY (wanted)
             AND pg_catalog.octet_length(el.item_path) <= 1000;
        GET DIAGNOSTICS added = ROW_COUNT;
        found := found + added;
        CONTINUE;
      END IF;
    END IF;
    RETURN QUERY SELECT w.* FROM public.user_memory_index_walk(e.value, top, e.key, 1, p_limit - found) w
                  WHERE pg_catalog.octet_length(w.item_path) <= 1000;
    GET DIAGNOSTICS added = ROW_COUNT;
    found := found + added;
    IF found > p_limit THEN
      RAISE EXCEPTION 'user_memory_append: the search index would hold more items than its limit'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END LOOP;
END
$$;

-- Where an end user's version may have changed items: the pointers whose rows (the pointer and
-- everything under it) are replaced by the result's. An element section is itself only while its
-- collection is still a map (else items.py walks the whole member, and so does this).
CREATE FUNCTION public.user_memory_index_scope(p_doc jsonb, p_sections text[]) RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
  SELECT coalesce(pg_catalog.array_agg(DISTINCT
           CASE WHEN pg_catalog.cardinality(parts) = 3 AND parts[2] IN ('goals', 'todos', 'events', 'parts')
                     AND NOT ('/' || parts[2]) = ANY (p_sections)
                     AND pg_catalog.jsonb_typeof(p_doc -> parts[2]) = 'object'
                THEN s ELSE '/' || parts[2] END), '{}')
    FROM pg_catalog.unnest(p_sections) s, LATERAL pg_catalog.string_to_array(s, '/') parts
$$;

REVOKE ALL ON FUNCTION public.user_memory_index_strip(text) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_truthy(jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_when(jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_until(jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_redacted(jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_words(jsonb, text) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_element(text, text, jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_walk(jsonb, text, text, integer, bigint)
  FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_sections(jsonb) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_items(jsonb, text[], bigint) FROM PUBLIC, anon, authenticated, service_role;
REVOKE ALL ON FUNCTION public.user_memory_index_scope(jsonb, text[]) FROM PUBLIC, anon, authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_append: 015's function; an end user's item rows are the result document's
-- ---------------------------------------------------------------------------------------------

-- Same signature, arguments and checks as 015 (CREATE OR REPLACE keeps its grants), except the
-- index for an end user (above). The service's branch is 015's, statement for statement.
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
  max_bytes := coalesce((SELECT s.value::integer FROM public.user_memory_settings s WHERE s.name = 'max_document_bytes'),
                        524288);
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
  IF p_items IS NOT NULL AND coalesce(indexed, 0) = coalesce(current_version, 0) AND end_user THEN
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
  ELSIF p_items IS NOT NULL AND coalesce(indexed, 0) = coalesce(current_version, 0) THEN
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
