-- A user's refresh on demand (POST /me/memory/refresh, the operators' route, the CLI) and after a
-- conversation memory (REFRESH_AFTER_CONVERSATION_SECONDS): the last refresh queued per user.
--
-- One row per user, holding no content: the run key of the refresh_user message queued
-- (`ondemand:<time>`), when it was asked for, the end of its window (later than the request when
-- the message is delayed: a refresh after a conversation memory) and who asked. The rate limit lives in the statement
-- that claims the row (an upsert whose update applies only once the minimum interval has passed),
-- in the same transaction as the send, so two requests at once queue one refresh and a send that
-- fails leaves no row behind.
--
-- Expand-only: a new table; the previous release never reads it. Only the service (the API's
-- service-side work, the worker) reads or writes it.

CREATE TABLE public.user_memory_refreshes (
  user_id uuid PRIMARY KEY,
  run_key text NOT NULL CHECK (length(run_key) BETWEEN 1 AND 200),
  requested_at timestamptz NOT NULL,
  window_end timestamptz NOT NULL CHECK (window_end >= requested_at),
  requested_by text NOT NULL CHECK (requested_by IN ('user', 'operator', 'conversation'))
);

COMMENT ON TABLE public.user_memory_refreshes IS
  'The last refresh queued for each user (run key, when, by whom): the per-user rate limit of on-demand refreshes.';

-- Supabase's default privileges grant ALL on new tables: revoke everything, then grant the
-- service exactly what it does. End users have no business here (RLS on, no policy).
REVOKE ALL ON public.user_memory_refreshes FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.user_memory_refreshes TO service_role;
ALTER TABLE public.user_memory_refreshes ENABLE ROW LEVEL SECURITY;
CALL public.user_memory_admit_service_role();
