-- The nightly run through the Batch API (SUMMARY_DELIVERY=batch): which users of a run are in
-- which batch.
--
-- One row per (run key, user) that a worker put into a batch, written before the batch is
-- created (so a redelivered or duplicate refresh_user message finds the user claimed and submits
-- nothing new: the primary key decides, in the statement that claims), given the endpoint's
-- batch id once it is created, and deleted once the user's answer went through the pipeline (the
-- run key on the version makes anything after that a no-op). The row holds no content: the
-- version of the head the request was built on (the answer is applied to it, then rebased onto
-- a head that moved meanwhile) and the SHA-256 of the request's body (the answer is used only
-- for the very request it answers).
--
-- Expand-only: a new table; the previous release never reads it. Only the service (the worker)
-- reads or writes it.

CREATE TABLE public.summary_batch_requests (
  run_key text NOT NULL CHECK (length(run_key) BETWEEN 1 AND 200),
  user_id uuid NOT NULL,
  batch_id text CHECK (batch_id IS NULL OR length(batch_id) BETWEEN 1 AND 200),
  base_version integer NOT NULL CHECK (base_version >= 0),
  request_sha256 text NOT NULL CHECK (request_sha256 ~ '^[0-9a-f]{64}$'),
  claimed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_key, user_id)
);

-- "The users of a batch" (the collect step).
CREATE INDEX idx_summary_batch_requests_batch ON public.summary_batch_requests (batch_id);

COMMENT ON TABLE public.summary_batch_requests IS
  'Users of a nightly run whose summary request is in a Batch API batch; deleted once collected.';
COMMENT ON COLUMN public.summary_batch_requests.batch_id IS 'The endpoint''s batch id; NULL while the batch is being created.';
COMMENT ON COLUMN public.summary_batch_requests.base_version IS 'The head version the request was built on.';
COMMENT ON COLUMN public.summary_batch_requests.request_sha256 IS 'SHA-256 of the request body''s canonical JSON.';

-- Supabase's default privileges grant ALL on new tables: revoke everything, then grant the
-- service exactly what the worker does. End users have no business here (RLS on, no policy).
REVOKE ALL ON public.summary_batch_requests FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.summary_batch_requests TO service_role;
ALTER TABLE public.summary_batch_requests ENABLE ROW LEVEL SECURITY;
CALL public.user_memory_admit_service_role();
