-- One statement per write: lock the head, check the expected version and the idempotency key,
-- insert the version row and move the head, atomically. A write is then one round trip
-- instead of BEGIN / lock / write / COMMIT. SECURITY INVOKER (the default): RLS still applies.
CREATE OR REPLACE FUNCTION user_memory_append(
  p_user_id uuid,
  p_expected integer,
  p_patch jsonb,
  p_checkpoint boolean,
  p_document jsonb,
  p_source text,
  p_key text
) RETURNS TABLE (status text, version integer, created_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
  current_version integer;
  recorded integer;
  ts timestamptz := clock_timestamp();
BEGIN
  SELECT h.version INTO current_version
    FROM user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  IF p_key IS NOT NULL THEN
    SELECT s.version INTO recorded
      FROM user_memory_snapshots s WHERE s.user_id = p_user_id AND s.idempotency_key = p_key;
    IF recorded IS NOT NULL THEN
      RETURN QUERY SELECT 'idempotent'::text, recorded, NULL::timestamptz;
      RETURN;
    END IF;
  END IF;
  IF coalesce(current_version, 0) <> p_expected THEN
    RETURN QUERY SELECT 'conflict'::text, coalesce(current_version, 0), NULL::timestamptz;
    RETURN;
  END IF;
  IF current_version IS NULL THEN
    INSERT INTO users (id) VALUES (p_user_id) ON CONFLICT (id) DO NOTHING;
  END IF;
  INSERT INTO user_memory_snapshots
    (user_id, version, patch, is_full_snapshot, full_snapshot_content, source_description, idempotency_key, created_at)
  VALUES
    (p_user_id, p_expected + 1, p_patch, p_checkpoint, CASE WHEN p_checkpoint THEN p_document END,
     p_source, p_key, ts);
  INSERT INTO user_memory_heads AS h (user_id, version, document, source_description, updated_at)
  VALUES (p_user_id, p_expected + 1, p_document, p_source, ts)
  ON CONFLICT (user_id) DO UPDATE
     SET version = EXCLUDED.version, document = EXCLUDED.document,
         source_description = EXCLUDED.source_description, updated_at = EXCLUDED.updated_at;
  RETURN QUERY SELECT 'written'::text, p_expected + 1, ts;
END
$$;

GRANT EXECUTE ON FUNCTION user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text)
  TO authenticated, service_role;
