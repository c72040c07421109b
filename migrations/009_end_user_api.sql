-- What the HTTP API needs from the database to run every request as the end user
-- (role authenticated, the token's sub as auth.uid()), so that row-level security, not only the
-- service's code, keeps one user's data from another:
--   * an end user records its own activity (POST /me/activity),
--   * an end user erases all of its own data (DELETE /me) through user_memory_erase_me().
--
-- Who may do what afterwards (tests/integration/test_api_security.py proves each line):
--   anon           still nothing.
--   authenticated  INSERT into user_activity of its own rows only (RLS), and only the columns
--                  an activity record has: never id or summarized_version (a user cannot mark
--                  its activity as summarized, nor hide it from the daily run);
--                  user_memory_erase_me() erases auth.uid()'s rows and nobody else's.
--   service_role   unchanged (user_memory_erase for any user).

-- ---------------------------------------------------------------------------------------------
-- Activity recorded by the end user
-- ---------------------------------------------------------------------------------------------

-- id is an identity column: inserting needs no privilege on its sequence, and none is granted
-- (USAGE would only let an end user burn ids with nextval()).
GRANT INSERT (user_id, occurred_at, kind, payload, source, external_id) ON user_activity TO authenticated;

CREATE POLICY "Users can insert own activity"
  ON user_activity FOR INSERT
  TO authenticated
  WITH CHECK (auth.uid() = user_id AND summarized_version IS NULL);

-- ---------------------------------------------------------------------------------------------
-- user_memory_erase_me: an end user's right to erasure
-- ---------------------------------------------------------------------------------------------

-- Erases the calling end user (auth.uid()) exactly as user_memory_erase does for the service,
-- in the caller's transaction, and returns the same rows (relation, deleted). A caller without
-- a usable sub in its claims is refused (SQLSTATE 42501): the function never guesses a user.
CREATE FUNCTION public.user_memory_erase_me()
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  me uuid;
BEGIN
  BEGIN
    me := auth.uid();
  EXCEPTION WHEN OTHERS THEN  -- a sub that is not a UUID, claims that are not JSON
    me := NULL;
  END;
  IF me IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase_me: no end user in the request''s claims'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN QUERY SELECT e.relation, e.deleted FROM public.user_memory_erase(me) e;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase_me() FROM PUBLIC, anon, service_role;
GRANT EXECUTE ON FUNCTION public.user_memory_erase_me() TO authenticated;

-- ---------------------------------------------------------------------------------------------
-- Key-value entries written by end users keep the time to live they asked for
-- ---------------------------------------------------------------------------------------------

-- Migration 008's trigger stamps an end user's updated_at with the database's now() (the
-- transaction's start), while the API computes expires_at from its own clock a moment later: a
-- TTL at the maximum (365 days) then broke the expiry CHECK by that moment. The writer's TTL is
-- what it meant, so for end users expires_at is now moved onto the database's clock too:
-- now() + (expires_at - updated_at as written). The CHECK still bounds that TTL, so a direct
-- writer cannot stretch it by writing an old updated_at: the difference is what is checked.
CREATE OR REPLACE FUNCTION public.user_memory_kv_stamp() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
  IF pg_has_role(current_user, 'service_role', 'USAGE')
     OR pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
    RETURN NEW;
  END IF;
  IF NEW.expires_at IS NOT NULL THEN
    NEW.expires_at := now() + (NEW.expires_at - coalesce(NEW.updated_at, now()));
  END IF;
  IF TG_OP = 'INSERT' THEN
    NEW.created_at := now();
  ELSE
    NEW.created_at := OLD.created_at;
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_kv_stamp() FROM PUBLIC, anon, authenticated, service_role;
