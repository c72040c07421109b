-- The search index off the append: user_memory_index_catch_up brings a user's memory_items up to
-- its head, from the stored document, in a statement of its own.
--
-- Until now the service sent each version's item changes (p_items, computed in Python) and
-- user_memory_append wrote them in the same statement, under the head's lock: about a third of a
-- version's WAL and of the time the lock is held (docs/benchmarks.md). The service now sends no
-- items, so the append leaves the head's indexed_version behind (as 012 already did for a writer
-- that sends none), and calls this function right after it:
--   * the rows of the sections touched by every version since indexed_version (their patches, read
--     from user_memory_snapshots; the whole document when a version's patch replaces the root,
--     when a version in between is missing, or when more than 100 versions are behind) are
--     derived here from the stored head document, by 020's functions (items.py's rules); every
--     row under those sections that the document no longer holds is removed; an unchanged row
--     keeps its version and is not touched (no lock, no WAL); a changed row gets the head's
--     version and time (updated_at is the head's updated_at, so the fan-out's "as they stood at
--     the window's end" reads the version's time, not the catch-up's);
--   * recur_until is kept from the row before when the event's value is unchanged, else NULL
--     (recurs for ever: range queries expand the stored value again, so NULL only widens which
--     events a range query considers, never hides one; the retention job's full reindex computes
--     it again);
--   * an end user (role authenticated) may catch up only its own index, and is bounded as 020's
--     append is (max_index_items, max_index_bytes): over them is refused (22023) before any row is
--     written. The API calls this in the request's transaction, so a refused index refuses the
--     write with it and nothing is half-written. The service is not bounded (as its rows never
--     were);
--   * 'current' without taking any lock when the index is already at the head (a read).
-- Nothing a caller sends becomes a row: the function takes only the user id.
--
-- Expand-only: user_memory_append is unchanged, so a previous release that still sends p_items
-- keeps its index in step in the append, and this function then finds it current.

CREATE FUNCTION public.user_memory_index_catch_up(p_user_id uuid)
RETURNS TABLE (status text, version integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  caller text := current_setting('role');
  claimed uuid;
  end_user boolean := false;
  current_version integer;
  indexed integer;
  doc jsonb;
  written timestamptz;
  patch jsonb;
  found_versions integer := 0;
  touched text[];
  sections text[] := '{}';
  whole boolean := false;
  scope text[];
  max_items bigint;
  max_index_bytes bigint;
  item_count bigint := 0;
  item_bytes bigint := 0;
  new_paths text[];
  new_kinds text[];
  new_texts text[];
  new_values jsonb[];
  new_statuses text[];
  new_due timestamptz[];
  new_starts timestamptz[];
  new_ends timestamptz[];
  new_recurring boolean[];
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  IF NOT (pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE')) THEN
    end_user := true;
    BEGIN
      claimed := auth.uid();
    EXCEPTION WHEN OTHERS THEN  -- a sub that is not a UUID, claims that are not JSON
      claimed := NULL;
    END;
    IF claimed IS NULL OR p_user_id IS DISTINCT FROM claimed THEN
      RAISE EXCEPTION 'user_memory_index_catch_up: may only index own memory'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    max_items := coalesce((SELECT s.value::bigint FROM public.user_memory_settings s WHERE s.name = 'max_index_items'),
                          20000);
    max_index_bytes := coalesce((SELECT s.value::bigint FROM public.user_memory_settings s
                                  WHERE s.name = 'max_index_bytes'), 4194304);
  END IF;

  -- Most calls find nothing to do only when a previous release indexed in the append: read first,
  -- lock only when there is work (a lock is a WAL record of its own).
  SELECT h.version, h.indexed_version INTO current_version, indexed
    FROM public.user_memory_heads h WHERE h.user_id = p_user_id;
  IF current_version IS NULL THEN
    RETURN QUERY SELECT 'none'::text, 0;
    RETURN;
  END IF;
  IF indexed = current_version THEN
    RETURN QUERY SELECT 'current'::text, current_version;
    RETURN;
  END IF;
  SELECT h.version, h.indexed_version, h.document, h.updated_at INTO current_version, indexed, doc, written
    FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  IF indexed = current_version THEN  -- another catch-up got there first
    RETURN QUERY SELECT 'current'::text, current_version;
    RETURN;
  END IF;

  IF indexed > current_version OR current_version - indexed > 100 THEN
    whole := true;
  ELSE
    FOR patch IN
      SELECT s.patch FROM public.user_memory_snapshots s
       WHERE s.user_id = p_user_id AND s.version > indexed AND s.version <= current_version
    LOOP
      found_versions := found_versions + 1;
      touched := public.user_memory_index_sections(patch);
      IF touched IS NULL THEN
        whole := true;
        EXIT;
      END IF;
      sections := sections || ARRAY(SELECT t FROM unnest(touched) t WHERE NOT t = ANY (sections));
    END LOOP;
    IF NOT whole AND found_versions <> current_version - indexed THEN  -- a version in between was pruned
      whole := true;
    END IF;
  END IF;
  IF whole THEN
    sections := NULL;
  END IF;
  scope := CASE WHEN sections IS NOT NULL THEN public.user_memory_index_scope(doc, sections) END;

  IF end_user THEN
    -- 020's bound, before anything is written: the rows outside the scope stay, the scope's become
    -- the document's.
    IF scope IS NOT NULL THEN
      SELECT count(*), coalesce(sum(pg_column_size(i.text) + pg_column_size(i.value)), 0) INTO item_count, item_bytes
        FROM public.memory_items i
       WHERE i.user_id = p_user_id
         AND NOT EXISTS (SELECT 1 FROM unnest(scope) p WHERE i.path = p OR left(i.path, length(p) + 1) = p || '/');
    END IF;
  END IF;
  SELECT array_agg(f.item_path), array_agg(f.item_kind), array_agg(f.item_text), array_agg(f.item_value),
         array_agg(f.item_status), array_agg(f.item_due_at), array_agg(f.item_starts_at), array_agg(f.item_ends_at),
         array_agg(f.item_recurring), item_count + count(*),
         item_bytes + coalesce(sum(pg_column_size(f.item_text) + pg_column_size(f.item_value)), 0)
    INTO new_paths, new_kinds, new_texts, new_values, new_statuses, new_due, new_starts, new_ends, new_recurring,
         item_count, item_bytes
    FROM public.user_memory_index_items(doc, sections,
                                        CASE WHEN end_user THEN max_items - item_count ELSE 9223372036854775807 END) f;
  IF end_user AND (item_count > max_items OR item_bytes > max_index_bytes) THEN
    RAISE EXCEPTION 'user_memory_index_catch_up: the search index would hold % items of % bytes, over the limit of % items or % bytes',
      item_count, item_bytes, max_items, max_index_bytes USING ERRCODE = 'invalid_parameter_value';
  END IF;

  DELETE FROM public.memory_items i
   WHERE i.user_id = p_user_id
     AND (scope IS NULL
          OR EXISTS (SELECT 1 FROM unnest(scope) p WHERE i.path = p OR left(i.path, length(p) + 1) = p || '/'))
     AND NOT EXISTS (SELECT 1 FROM unnest(new_paths) n(path) WHERE n.path = i.path);
  INSERT INTO public.memory_items AS i
    (user_id, path, version, kind, text, value, status, due_at, starts_at, ends_at, recurring, recur_until, updated_at)
  SELECT p_user_id, f.path, current_version, f.kind, f.text, f.value, f.status, f.due_at, f.starts_at, f.ends_at,
         f.recurring,
         CASE WHEN f.recurring AND kept.value = f.value THEN kept.recur_until END,
         written
    FROM unnest(new_paths, new_kinds, new_texts, new_values, new_statuses, new_due, new_starts, new_ends, new_recurring)
         AS f(path, kind, text, value, status, due_at, starts_at, ends_at, recurring)
    LEFT JOIN public.memory_items kept ON kept.user_id = p_user_id AND kept.path = f.path AND kept.recurring
   -- Unchanged rows are left out here, not only by the conflict's WHERE: a conflicting row the
   -- WHERE skips is still locked, a WAL record of its own for every unchanged item in scope.
   WHERE NOT EXISTS (
           SELECT 1 FROM public.memory_items o
            WHERE o.user_id = p_user_id AND o.path = f.path
              AND (o.kind, o.text, o.value, o.status, o.due_at, o.starts_at, o.ends_at, o.recurring)
                  IS NOT DISTINCT FROM (f.kind, f.text, f.value, f.status, f.due_at, f.starts_at, f.ends_at, f.recurring)
              AND (NOT f.recurring OR kept.value = f.value))
  ON CONFLICT (user_id, path) DO UPDATE
     SET version = EXCLUDED.version, kind = EXCLUDED.kind, text = EXCLUDED.text, value = EXCLUDED.value,
         status = EXCLUDED.status, due_at = EXCLUDED.due_at, starts_at = EXCLUDED.starts_at,
         ends_at = EXCLUDED.ends_at, recurring = EXCLUDED.recurring, recur_until = EXCLUDED.recur_until,
         updated_at = EXCLUDED.updated_at
   WHERE (i.kind, i.text, i.value, i.status, i.due_at, i.starts_at, i.ends_at, i.recurring, i.recur_until)
         IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.text, EXCLUDED.value, EXCLUDED.status, EXCLUDED.due_at,
                           EXCLUDED.starts_at, EXCLUDED.ends_at, EXCLUDED.recurring, EXCLUDED.recur_until);
  UPDATE public.user_memory_heads h SET indexed_version = current_version WHERE h.user_id = p_user_id;
  RETURN QUERY SELECT 'indexed'::text, current_version;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_index_catch_up(uuid) FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_index_catch_up(uuid) TO authenticated, service_role;
