-- Activity is summarized row by row: each row records the memory version whose summary took
-- it in, so a run reads "this user's activity not yet summarized" instead of a time window,
-- and activity that arrives late (recorded after its window's run) is picked up by the next run.

-- Idempotency of ingestion is per user: two users may carry the same (source, external_id),
-- e.g. a message id that is only unique within a conversation. The old key was stricter, so
-- existing rows satisfy the new one. Adding the constraint builds its index under an exclusive
-- lock on user_activity; migrations run in one transaction, so it cannot be CONCURRENTLY.
ALTER TABLE user_activity
  ADD CONSTRAINT user_activity_user_source_external_id_key UNIQUE (user_id, source, external_id);
ALTER TABLE user_activity DROP CONSTRAINT user_activity_source_external_id_key;

-- Rows that exist before this migration start as not summarized (NULL).
ALTER TABLE user_activity ADD COLUMN summarized_version integer NULL;
COMMENT ON COLUMN user_activity.summarized_version IS
  'The memory version whose summary included this row (set by user_memory_append or '
  'user_memory_mark_summarized); NULL while the row has not been summarized.';

-- The worker's read: this user's unsummarized activity (occurred_at < window end), oldest
-- first by id. Only unsummarized rows are in the index, so it stays small however long the
-- history grows; rows leave it when they are marked.
CREATE INDEX IF NOT EXISTS idx_user_activity_unsummarized
  ON user_activity (user_id, id) WHERE summarized_version IS NULL;

-- Late activity needs no index of its own: it is unsummarized, so the fan-out's page query on
-- idx_user_activity_unsummarized finds it like the day's activity.

-- user_memory_append gains p_activity_ids: the activity rows the written version summarizes
-- are marked in the same transaction as the version row and the head. The 7-argument function
-- is dropped rather than overloaded, so a 7-argument call resolves to this one (the new
-- parameter defaults to NULL) and there is one function to grant and revoke.
DROP FUNCTION IF EXISTS user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text);

CREATE FUNCTION user_memory_append(
  p_user_id uuid,
  p_expected integer,
  p_patch jsonb,
  p_checkpoint boolean,
  p_document jsonb,
  p_source text,
  p_key text,
  p_activity_ids bigint[] DEFAULT NULL
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
  IF p_activity_ids IS NOT NULL THEN
    UPDATE user_activity a SET summarized_version = p_expected + 1
     WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL;
  END IF;
  RETURN QUERY SELECT 'written'::text, p_expected + 1, ts;
END
$$;

-- For a run whose summary changed nothing: no version is written, but the activity it read
-- is marked with the version it was summarized against. Rows already marked keep their mark.
-- Returns how many rows were marked.
CREATE FUNCTION user_memory_mark_summarized(
  p_user_id uuid,
  p_version integer,
  p_activity_ids bigint[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
  marked integer;
BEGIN
  UPDATE user_activity a SET summarized_version = p_version
   WHERE a.user_id = p_user_id AND a.id = ANY (p_activity_ids) AND a.summarized_version IS NULL;
  GET DIAGNOSTICS marked = ROW_COUNT;
  RETURN marked;
END
$$;

-- Grants as 004 had them; 006_append_only_history.sql narrows them and makes both functions
-- SECURITY DEFINER.
REVOKE EXECUTE ON FUNCTION user_memory_mark_summarized(uuid, integer, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION user_memory_append(uuid, integer, jsonb, boolean, jsonb, text, text, bigint[])
  TO authenticated, service_role;
GRANT EXECUTE ON FUNCTION user_memory_mark_summarized(uuid, integer, bigint[]) TO service_role;

-- Activity recorded before this migration was summarized by the old window-based runs, or
-- never will be by them. Mark as summarized, by that run's version, every row that occurred
-- and was recorded before the user's last summary run wrote (a version with a run key; an edit
-- by an app or agent does not count); the rest (activity since, and every row of users who
-- never had a summary) is what the next run summarizes.
UPDATE user_activity a SET summarized_version = last_run.version
  FROM (SELECT DISTINCT ON (s.user_id) s.user_id, s.version, s.created_at
          FROM user_memory_snapshots s
         WHERE s.idempotency_key LIKE 'daily:%' OR s.idempotency_key LIKE 'window:%'
         ORDER BY s.user_id, s.version DESC) last_run
 WHERE a.user_id = last_run.user_id AND a.summarized_version IS NULL
   AND a.occurred_at < last_run.created_at AND a.recorded_at < last_run.created_at;

