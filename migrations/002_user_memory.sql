-- User memory: differential snapshots (RFC 6902 patches + periodic checkpoints) and heads.

CREATE TABLE IF NOT EXISTS user_memory_snapshots (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  version integer NOT NULL,
  patch jsonb NOT NULL,
  is_full_snapshot boolean NOT NULL DEFAULT FALSE,
  full_snapshot_content jsonb NULL,
  source_description text NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Make sure version is unique per user
CREATE UNIQUE INDEX IF NOT EXISTS idx_user_memory_snapshots_user_version ON user_memory_snapshots(user_id, version);

-- Add other useful indexes
CREATE INDEX IF NOT EXISTS idx_user_memory_snapshots_user_id ON user_memory_snapshots(user_id);
CREATE INDEX IF NOT EXISTS idx_user_memory_snapshots_user_created_at ON user_memory_snapshots(user_id, created_at DESC);
CREATE INDEX IF NOT EXISTS idx_user_memory_snapshots_checkpoints ON user_memory_snapshots(user_id, created_at DESC) WHERE is_full_snapshot = TRUE;

-- RLS
ALTER TABLE user_memory_snapshots ENABLE ROW LEVEL SECURITY;

-- Policies
CREATE POLICY "Users can view own memory snapshots"
  ON user_memory_snapshots FOR SELECT
  USING (auth.uid() = user_id);

CREATE POLICY "Users can insert own memory snapshots"
  ON user_memory_snapshots FOR INSERT
  WITH CHECK (auth.uid() = user_id);

CREATE POLICY "Users can update own memory snapshots"
  ON user_memory_snapshots FOR UPDATE
  USING (auth.uid() = user_id);

CREATE POLICY "Users can delete own memory snapshots"
  ON user_memory_snapshots FOR DELETE
  USING (auth.uid() = user_id);

-- Comments
COMMENT ON TABLE user_memory_snapshots IS 'Stores the history of a user''s memory as differential snapshots (JSON Patches).';
COMMENT ON COLUMN user_memory_snapshots.version IS 'A sequential version number for each user''s memory history.';
COMMENT ON COLUMN user_memory_snapshots.patch IS 'A JSON Patch (RFC 6902) object describing the change from the previous version.';
COMMENT ON COLUMN user_memory_snapshots.is_full_snapshot IS 'If TRUE, this row is a checkpoint containing the full memory state.';
COMMENT ON COLUMN user_memory_snapshots.full_snapshot_content IS 'The full memory state, only present for checkpoints (when is_full_snapshot is TRUE).';

-- Idempotency: a run key (e.g. daily:2026-11-21) is recorded with the version it produced,
-- in the same transaction, so a redelivered message writes nothing new.
ALTER TABLE user_memory_snapshots ADD COLUMN IF NOT EXISTS idempotency_key text NULL;
CREATE UNIQUE INDEX IF NOT EXISTS idx_user_memory_snapshots_user_idempotency_key
  ON user_memory_snapshots(user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
COMMENT ON COLUMN user_memory_snapshots.idempotency_key IS 'Caller''s idempotency key (run key) of the write that produced this version; unique per user.';
ALTER TABLE user_memory_snapshots ADD CONSTRAINT user_memory_snapshots_version_positive CHECK (version >= 1);

-- Heads: the latest version with its full document, one row per user. The O(1) read and
-- the row concurrent writers lock (SELECT ... FOR UPDATE) to serialize.
CREATE TABLE IF NOT EXISTS user_memory_heads (
  user_id uuid PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
  version integer NOT NULL CHECK (version >= 1),
  document jsonb NOT NULL,
  source_description text NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE user_memory_heads IS 'The latest version of each user''s memory with its full document.';

ALTER TABLE user_memory_heads ENABLE ROW LEVEL SECURITY;

CREATE POLICY "Users can view own memory head"
  ON user_memory_heads FOR SELECT
  USING (auth.uid() = user_id);

CREATE POLICY "Users can insert own memory head"
  ON user_memory_heads FOR INSERT
  WITH CHECK (auth.uid() = user_id);

CREATE POLICY "Users can update own memory head"
  ON user_memory_heads FOR UPDATE
  USING (auth.uid() = user_id)
  WITH CHECK (auth.uid() = user_id);

CREATE POLICY "Users can delete own memory head"
  ON user_memory_heads FOR DELETE
  USING (auth.uid() = user_id);

-- Supabase grants table privileges to its API roles and relies on RLS; do the same.
GRANT SELECT, INSERT, UPDATE, DELETE ON user_memory_snapshots, user_memory_heads TO anon, authenticated, service_role;
GRANT SELECT ON users TO authenticated, service_role;
GRANT INSERT ON users TO service_role;
