-- Runs as resources, and undoing one (issue 23, part 2).
--
-- A run is the set of versions carrying its run key (`daily:<date>`, `ondemand:<time>`, the
-- idempotency_key column). Listing runs and finding a run's users needs the run key first: the
-- unique index on (user_id, idempotency_key) cannot serve that. A partial index on the service's
-- run keys (not the end users' `api:` keys) does; it costs the nightly append one more index
-- entry per version.
--
-- Undoing a run is an operation of its own (run_reverts), over the users the run wrote a version
-- for (run_revert_users, one row per user, its outcome once done). The rows hold no content:
-- ids, versions, and for a conflict the JSON Pointers both sides changed.
--
-- Expand-only: a new index and new tables; the previous release never reads them. Only the
-- service (the API's operators, the worker) reads or writes the tables.

CREATE INDEX IF NOT EXISTS idx_user_memory_snapshots_run_key
  ON public.user_memory_snapshots (idempotency_key, created_at)
  WHERE idempotency_key IS NOT NULL AND left(idempotency_key, 4) <> 'api:';

CREATE TABLE public.run_reverts (
  revert_id uuid PRIMARY KEY,
  run_key text NOT NULL CHECK (length(run_key) BETWEEN 1 AND 200),
  user_id uuid NULL,
  requested_by text NULL CHECK (requested_by IS NULL OR length(requested_by) <= 200),
  created_at timestamptz NOT NULL DEFAULT now(),
  queued_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE public.run_revert_users (
  revert_id uuid NOT NULL REFERENCES public.run_reverts (revert_id) ON DELETE CASCADE,
  user_id uuid NOT NULL,
  run_version integer NOT NULL CHECK (run_version >= 1),
  outcome text NOT NULL DEFAULT 'pending'
    CHECK (outcome IN ('pending', 'reverted', 'unchanged', 'conflict', 'failed')),
  version integer NULL CHECK (version IS NULL OR version >= 1),
  kind text NULL CHECK (kind IS NULL OR kind IN ('revert', 'inverse', 'repeat')),
  paths jsonb NULL CHECK (paths IS NULL OR jsonb_typeof(paths) = 'array'),
  error text NULL CHECK (error IS NULL OR length(error) <= 500),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (revert_id, user_id)
);

-- "The pending users of an operation, a page at a time" (the fan-out, a resume) and the report.
CREATE INDEX idx_run_revert_users_outcome ON public.run_revert_users (revert_id, outcome, user_id);

COMMENT ON TABLE public.run_reverts IS
  'An operator''s undo of one run: for one user (user_id) or every user the run wrote a version for (NULL).';
COMMENT ON TABLE public.run_revert_users IS
  'One user of a run''s undo: pending, then reverted (version written), unchanged, conflict (paths) or failed (error).';
COMMENT ON COLUMN public.run_revert_users.paths IS
  'For a conflict: the JSON Pointers the run changed that a later version also changed.';

-- Supabase's default privileges grant ALL on new tables: revoke everything, then grant the
-- service what the API's operators and the worker do. End users have no business here (RLS on,
-- no policy).
REVOKE ALL ON public.run_reverts, public.run_revert_users FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, INSERT, UPDATE ON public.run_reverts, public.run_revert_users TO service_role;
ALTER TABLE public.run_reverts ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.run_revert_users ENABLE ROW LEVEL SECURITY;
CALL public.user_memory_admit_service_role();

-- Erasure: a user's undo rows (ids and conflict paths) go with the user. Both erasures
-- (user_memory_erase, user_memory_erase_me) delete the user's head; a trigger on that delete
-- keeps them as they are (the previous release's functions erase these rows too). SECURITY
-- DEFINER: an end user's erasure holds no privilege on these tables.
CREATE FUNCTION public.run_revert_users_erase()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  DELETE FROM public.run_revert_users u WHERE u.user_id = OLD.user_id;
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION public.run_revert_users_erase() FROM PUBLIC, anon, authenticated, service_role;

CREATE TRIGGER user_memory_heads_erase_run_reverts
  AFTER DELETE ON public.user_memory_heads
  FOR EACH ROW EXECUTE FUNCTION public.run_revert_users_erase();
