-- Activity: what happened to a user; the input of a summary. Ingestion is idempotent on
-- (source, external_id). No foreign key to users: activity may arrive before the user row.

CREATE TABLE IF NOT EXISTS user_activity (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id uuid NOT NULL,
  occurred_at timestamptz NOT NULL,
  kind text NOT NULL,
  payload jsonb NOT NULL DEFAULT '{}'::jsonb,
  source text NOT NULL,
  external_id text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT user_activity_source_external_id_key UNIQUE (source, external_id)
);

-- Serves both "who was active in this window" (keyset on user_id, window checked in the
-- index) and "this user's activity in this window, in time order".
CREATE INDEX IF NOT EXISTS idx_user_activity_user_occurred ON user_activity(user_id, occurred_at);
-- Lets the fan-out skip straight to the window when few users were active.
CREATE INDEX IF NOT EXISTS idx_user_activity_occurred ON user_activity(occurred_at);

COMMENT ON TABLE user_activity IS 'What happened to a user (sessions, messages, insight interactions): the input of a memory summary.';

ALTER TABLE user_activity ENABLE ROW LEVEL SECURITY;
CREATE POLICY "Users can view own activity"
  ON user_activity FOR SELECT
  USING (auth.uid() = user_id);

GRANT SELECT ON user_activity TO anon, authenticated;
GRANT SELECT, INSERT, UPDATE, DELETE ON user_activity TO service_role;
