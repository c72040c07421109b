-- A memory_reset activity clears a user's whole memory at the next summary, the triggers and the
-- safety notes included (domain/requests.py). Only the service records one: the worker's queue
-- (record_activity messages, which only the deployment's own services can send), written with
-- the service's rights. An end user records its own activity (POST /me/activity, or, on Supabase,
-- an INSERT through the Data API under RLS); the API refuses a reset from it (403), and this
-- policy refuses the row itself, so that every stored reset came from the service.
--
-- A restrictive policy is ANDed with the permissive "Users can insert own activity" (migration
-- 009): the end user's insert must pass both. No function, no grant: nothing to revoke.

CREATE POLICY "Users cannot record a memory reset"
  ON user_activity AS RESTRICTIVE FOR INSERT
  TO authenticated
  WITH CHECK (kind <> 'memory_reset');
