-- Memory-changed events: a transactional outbox, written with every version, relayed to
-- EventBridge and to operators' webhooks (jobs/events.py).
--
--   user_memory_events            one row per committed version: user, version, source, run key,
--                                 the top-level sections its patch touched (never content).
--                                 Written by a trigger on the version row's INSERT, so it is part
--                                 of the version's own transaction whoever writes it (the append
--                                 function of any release): a rolled-back write leaves no event.
--                                 Deleted with its version row (a trigger on the versions' DELETE,
--                                 statement-level): the erase, which deletes the user's version
--                                 rows, takes the user's events (and their deliveries) with them,
--                                 so an erased user's events stop. A trigger rather than a foreign
--                                 key: a key would turn TRUNCATE of the versions into "referenced
--                                 by a foreign key" before the append-only trigger could refuse it.
--   user_memory_webhooks          endpoints operators registered: URL, the name of the Secrets
--                                 Manager secret that signs for it (never the secret), state
--                                 (enabled, failing since, next attempt, disabled and why).
--   user_memory_event_deliveries  (sink, event): the event reached that sink ('eventbridge' or a
--                                 webhook's id). Written after the send, so a relay that stops
--                                 between sending and marking sends the event again: at least once.
--
-- Expand-only: new tables and a new trigger; the previous release's code writes versions as
-- before and never reads these. Only the service (service_role) reads or writes them; end users
-- hold nothing here (RLS on, no policy for them).

CREATE TABLE public.user_memory_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id uuid NOT NULL,
  version integer NOT NULL CHECK (version >= 1),
  source text NOT NULL,
  run_key text,
  sections text[] NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
-- The erase's trigger finds a user's events by this index; it also keeps one event per version.
CREATE UNIQUE INDEX idx_user_memory_events_user_version ON public.user_memory_events (user_id, version);

COMMENT ON TABLE public.user_memory_events IS
  'The memory-changed outbox: one row per committed version, no content; relayed by the events function.';
COMMENT ON COLUMN public.user_memory_events.sections IS 'The top-level sections the version''s patch touched.';

CREATE TABLE public.user_memory_webhooks (
  id uuid PRIMARY KEY,
  url text NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2000),
  description text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
  secret_name text NOT NULL CHECK (length(secret_name) BETWEEN 1 AND 512),
  enabled boolean NOT NULL DEFAULT true,
  disabled_reason text CHECK (length(disabled_reason) <= 500),
  -- Events after this one are delivered: an endpoint gets what happens after it was registered.
  after_event_id bigint NOT NULL DEFAULT 0,
  failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  failing_since timestamptz,
  next_attempt_at timestamptz,
  last_error text CHECK (length(last_error) <= 500),
  last_delivered_at timestamptz,
  created_by text CHECK (length(created_by) <= 500),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON COLUMN public.user_memory_webhooks.secret_name IS
  'The Secrets Manager secret that signs this endpoint''s requests; the secret itself is never stored here.';

CREATE TABLE public.user_memory_event_deliveries (
  sink text NOT NULL CHECK (length(sink) BETWEEN 1 AND 100),
  event_id bigint NOT NULL REFERENCES public.user_memory_events (id) ON DELETE CASCADE,
  delivered_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (sink, event_id)
);
-- The cascade from an event (the erase, the prune) finds its deliveries by this index.
CREATE INDEX idx_user_memory_event_deliveries_event ON public.user_memory_event_deliveries (event_id);

-- ---------------------------------------------------------------------------------------------
-- The outbox row, in the version's transaction
-- ---------------------------------------------------------------------------------------------

-- The top-level sections a patch touched: the first token of each operation's path (and from),
-- JSON Pointer escapes undone; an operation on the whole document touches its value's keys.
CREATE FUNCTION public.user_memory_patch_sections(p_patch jsonb)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
  SELECT coalesce(array_agg(DISTINCT s ORDER BY s), '{}')
    FROM (
      SELECT replace(replace(split_part(p.pointer, '/', 2), '~1', '/'), '~0', '~') AS s
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_patch) = 'array' THEN p_patch ELSE '[]' END) op,
             LATERAL (VALUES (op->>'path'), (op->>'from')) AS p(pointer)
       WHERE p.pointer LIKE '/%'
      UNION
      SELECT k
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_patch) = 'array' THEN p_patch ELSE '[]' END) op,
             LATERAL jsonb_object_keys(CASE WHEN op->>'path' = '' AND jsonb_typeof(op->'value') = 'object'
                                            THEN op->'value' ELSE '{}' END) AS k
    ) sections(s);
$$;
REVOKE ALL ON FUNCTION public.user_memory_patch_sections(jsonb) FROM PUBLIC, anon, authenticated, service_role;

-- SECURITY DEFINER: the row goes in as the owner whoever inserted the version (an end user's
-- append runs as the owner already; a trigger must not depend on it).
CREATE FUNCTION public.user_memory_record_event() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  INSERT INTO public.user_memory_events (user_id, version, source, run_key, sections)
  VALUES (NEW.user_id, NEW.version, coalesce(NEW.source_description, ''), NEW.idempotency_key,
          public.user_memory_patch_sections(NEW.patch));
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION public.user_memory_record_event() FROM PUBLIC, anon, authenticated, service_role;

CREATE TRIGGER user_memory_snapshots_event
  AFTER INSERT ON public.user_memory_snapshots
  FOR EACH ROW EXECUTE FUNCTION public.user_memory_record_event();

-- Whatever deletes version rows (user_memory_erase, the cascade from users) deletes their events
-- in the same statement's transaction; their delivery marks follow by the foreign key.
CREATE FUNCTION public.user_memory_forget_events() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  DELETE FROM public.user_memory_events e
   USING gone g
   WHERE e.user_id = g.user_id AND e.version = g.version;
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION public.user_memory_forget_events() FROM PUBLIC, anon, authenticated, service_role;

CREATE TRIGGER user_memory_snapshots_forget_events
  AFTER DELETE ON public.user_memory_snapshots
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION public.user_memory_forget_events();

-- ---------------------------------------------------------------------------------------------
-- Privileges: the service's alone
-- ---------------------------------------------------------------------------------------------

-- Supabase's default privileges grant ALL on new tables and sequences: revoke everything, then
-- grant the relay and the operators' routes exactly what they do. Events are inserted by the
-- trigger only; the service reads them and deletes delivered ones (the relay's prune).
REVOKE ALL ON public.user_memory_events, public.user_memory_webhooks, public.user_memory_event_deliveries
  FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT, DELETE ON public.user_memory_events TO service_role;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.user_memory_webhooks TO service_role;
GRANT SELECT, INSERT, DELETE ON public.user_memory_event_deliveries TO service_role;
DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM PUBLIC, anon, authenticated, service_role',
                 pg_get_serial_sequence('public.user_memory_events', 'id'));
END
$$;
ALTER TABLE public.user_memory_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.user_memory_webhooks ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.user_memory_event_deliveries ENABLE ROW LEVEL SECURITY;
CALL public.user_memory_admit_service_role();
