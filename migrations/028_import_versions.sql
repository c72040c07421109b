-- Importing an export: a user's history written back as it was, a page of versions at a time.
--
--   user_memory_import_versions(user, rows, head)  (service only) appends the page's version rows
--     as exported (patch, checkpoint, created_at, source, idempotency key, provenance) right after
--     the user's head, and moves the head to the page's last version with the document the importer
--     rebuilt and checked (adapters/exports.py: every patch applied, every checkpoint compared).
--     The first page must start at version 1 on a user with no history: an import never lands on
--     top of an existing memory. Pages must follow each other (the head is locked; a page that
--     does not start at head + 1 is refused whole), so an interrupted import resumes where it
--     stopped. The search index is left behind (indexed_version) for user_memory_index_catch_up.
--
-- Expand-only: a new function.

CREATE FUNCTION public.user_memory_import_versions(p_user_id uuid, p_rows jsonb, p_head jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  current_version integer;
  first_version integer;
  last_version integer;
  n integer;
  last_source text;
  last_at timestamptz;
BEGIN
  IF p_user_id IS NULL OR p_rows IS NULL OR jsonb_typeof(p_rows) <> 'array' OR jsonb_array_length(p_rows) = 0
     OR p_head IS NULL OR jsonb_typeof(p_head) <> 'object' THEN
    RAISE EXCEPTION 'user_memory_import_versions: a user, a non-empty array of rows and the head document are required'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT h.version INTO current_version FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  current_version := coalesce(current_version, 0);
  SELECT min((r ->> 'version')::integer), max((r ->> 'version')::integer), count(*)
    INTO first_version, last_version, n FROM jsonb_array_elements(p_rows) r;
  IF first_version <> current_version + 1 OR last_version - first_version + 1 <> n THEN
    RAISE EXCEPTION 'user_memory_import_versions: the page holds versions % to % (% rows), the head is at %',
                    first_version, last_version, n, current_version
      USING ERRCODE = 'serialization_failure';
  END IF;
  IF current_version = 0 THEN
    INSERT INTO public.users (id) VALUES (p_user_id) ON CONFLICT (id) DO NOTHING;
  END IF;
  INSERT INTO public.user_memory_snapshots
    (user_id, version, patch, is_full_snapshot, full_snapshot_content, source_description, idempotency_key,
     created_at, provenance)
  SELECT p_user_id, r.version, r.patch, r.checkpoint IS NOT NULL AND r.checkpoint <> 'null'::jsonb,
         CASE WHEN r.checkpoint <> 'null'::jsonb THEN r.checkpoint END, r.source, r.idempotency_key,
         r.created_at, CASE WHEN r.provenance <> 'null'::jsonb THEN r.provenance END
    FROM jsonb_to_recordset(p_rows) AS r(version integer, patch jsonb, checkpoint jsonb, source text,
                                          idempotency_key text, created_at timestamptz, provenance jsonb)
   ORDER BY r.version;
  SELECT r ->> 'source', (r ->> 'created_at')::timestamptz INTO last_source, last_at
    FROM jsonb_array_elements(p_rows) r WHERE (r ->> 'version')::integer = last_version;
  INSERT INTO public.user_memory_heads AS h (user_id, version, document, source_description, updated_at)
  VALUES (p_user_id, last_version, p_head, last_source, last_at)
  ON CONFLICT (user_id) DO UPDATE
     SET version = EXCLUDED.version, document = EXCLUDED.document,
         source_description = EXCLUDED.source_description, updated_at = EXCLUDED.updated_at;
  RETURN last_version;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_import_versions(uuid, jsonb, jsonb) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_import_versions(uuid, jsonb, jsonb) TO service_role;
