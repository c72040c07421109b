-- Conversations belong to a user: keyed by (user_id, conversation_id), no longer by a global id.
--
-- Until now (migration 011) a conversation id was global and belonged to the user who recorded
-- its first message: a user naming another user's id was told "belongs to another user" (an
-- oracle for other users' ids), and a user who wrote first under an id locked its real owner out
-- for good. From here on, each user has its own namespace of conversation ids: two users using
-- the same id each get their own conversation, and nothing a user sends can reveal or block
-- another user's.
--
--   conversations          primary key (user_id, conversation_id) (was conversation_id alone,
--                          beside a unique (user_id, conversation_id)).
--   conversation_messages  primary key (user_id, conversation_id, seq); idempotent on
--                          (user_id, conversation_id, message_id).
--   conversation_memories  primary key (user_id, conversation_id).
--   idx_conversations_pending  (last_message_at, user_id, conversation_id), the trigger's keyset
--                          order; same partial predicate.
--   user_memory_record_messages  conversations found or created by (user_id, conversation_id);
--                          no "belongs to another user" refusal any more (nothing to refuse).
--   user_memory_erase      deletes by user_id on each table (the old join on conversation_id
--                          alone would reach another user's conversation of the same id).
--
-- Existing rows keep their owner: under the old key every conversation id had exactly one
-- user, so every row is already unique under the new keys and each foreign key still holds; no
-- row is rewritten. Row-level security is unchanged (auth.uid() = user_id on each table).
--
-- Who may do what is unchanged (migration 011's header): no new table, sequence or function;
-- the two functions replaced keep their owner and grants, restated below all the same.

-- ---------------------------------------------------------------------------------------------
-- Keys: the foreign keys reference (user_id, conversation_id), so they are dropped first, the
-- keys re-made, then the foreign keys again.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE conversation_messages DROP CONSTRAINT conversation_messages_conversation_fkey;
ALTER TABLE conversation_memories DROP CONSTRAINT conversation_memories_conversation_fkey;

ALTER TABLE conversations
  DROP CONSTRAINT conversations_pkey,
  DROP CONSTRAINT conversations_user_conversation_key,
  -- User first: also serves the erase, the export and RLS by user.
  ADD CONSTRAINT conversations_pkey PRIMARY KEY (user_id, conversation_id);

ALTER TABLE conversation_messages
  DROP CONSTRAINT conversation_messages_pkey,
  DROP CONSTRAINT conversation_messages_message_key,
  ADD CONSTRAINT conversation_messages_pkey PRIMARY KEY (user_id, conversation_id, seq),
  ADD CONSTRAINT conversation_messages_message_key UNIQUE (user_id, conversation_id, message_id),
  ADD CONSTRAINT conversation_messages_conversation_fkey FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE;

ALTER TABLE conversation_memories
  DROP CONSTRAINT conversation_memories_pkey,
  ADD CONSTRAINT conversation_memories_pkey PRIMARY KEY (user_id, conversation_id),
  ADD CONSTRAINT conversation_memories_conversation_fkey FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE;

-- The trigger's pages: (last_message_at, user_id, conversation_id) is its keyset order now,
--   SELECT user_id, conversation_id, last_message_at FROM conversations
--    WHERE coalesce(memory_through, 0) < messages AND last_message_at < $cutoff
--      AND (last_message_at, user_id, conversation_id) > ($after_at, $after_user, $after_id)
--    ORDER BY last_message_at, user_id, conversation_id LIMIT $page
-- still an index-only scan of the pending conversations alone.
DROP INDEX idx_conversations_pending;
CREATE INDEX idx_conversations_pending
  ON conversations (last_message_at, user_id, conversation_id)
  WHERE coalesce(memory_through, 0) < messages;

COMMENT ON TABLE conversations IS 'A chat conversation of one user (its id is the user''s own): message count and times, and how far its memory goes.';
COMMENT ON TABLE conversation_messages IS 'The messages of a conversation, idempotent on (user_id, conversation_id, message_id).';

-- ---------------------------------------------------------------------------------------------
-- user_memory_record_messages: a conversation is the (user, id) pair
-- ---------------------------------------------------------------------------------------------

-- p_messages is a JSON array of {user_id, conversation_id, message_id, role, text, occurred_at,
-- source}. Each message new to its conversation (the user's conversation of that id, created by
-- its first message) gets the next seq, moves the conversation's message count and times, and so
-- makes its memory stale; a message whose (user_id, conversation_id, message_id) is recorded
-- already is ignored. Messages are taken in (user_id, conversation_id, occurred_at, message_id)
-- order, so concurrent callers lock conversations in the same order. Returns (received,
-- recorded). Refused with SQLSTATE 42501: an end user's message for another user (every user_id
-- must be auth.uid()). p_messages not an array: 22023. The whole call is one statement: all of
-- it is recorded or none.
--
-- SECURITY DEFINER: end users hold no INSERT or UPDATE on the tables (they could otherwise
-- rewrite a conversation's counters and hide it from the trigger); this function is their only
-- way in. The caller is identified as user_memory_append does (migration 006).
CREATE OR REPLACE FUNCTION public.user_memory_record_messages(p_messages jsonb)
RETURNS TABLE (received integer, recorded integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  caller text := current_setting('role');
  claimed uuid;
  trusted boolean;
  m record;
  next_seq integer;
  n_recorded integer := 0;
BEGIN
  IF caller = 'none' THEN
    caller := session_user;
  END IF;
  trusted := pg_has_role(caller, 'service_role', 'USAGE') OR pg_has_role(caller, current_user, 'USAGE');
  IF NOT trusted THEN
    BEGIN
      claimed := auth.uid();
    EXCEPTION WHEN OTHERS THEN  -- a sub that is not a UUID, claims that are not JSON
      claimed := NULL;
    END;
    IF claimed IS NULL THEN
      RAISE EXCEPTION 'user_memory_record_messages: no end user in the request''s claims'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF jsonb_typeof(p_messages) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'user_memory_record_messages: messages must be a JSON array, got %',
      coalesce(jsonb_typeof(p_messages), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  FOR m IN
    SELECT (x.e ->> 'user_id')::uuid AS user_id, x.e ->> 'conversation_id' AS conversation_id,
           x.e ->> 'message_id' AS message_id, x.e ->> 'role' AS role, x.e ->> 'text' AS text,
           (x.e ->> 'occurred_at')::timestamptz AS occurred_at, x.e ->> 'source' AS source
      FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS x(e, n)
     ORDER BY (x.e ->> 'user_id')::uuid, x.e ->> 'conversation_id' COLLATE "C",
              (x.e ->> 'occurred_at')::timestamptz, x.e ->> 'message_id' COLLATE "C", x.n
  LOOP
    IF NOT trusted AND m.user_id IS DISTINCT FROM claimed THEN
      RAISE EXCEPTION 'user_memory_record_messages: may only record own messages'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO public.conversations AS c (conversation_id, user_id, first_message_at, last_message_at)
    VALUES (m.conversation_id, m.user_id, m.occurred_at, m.occurred_at)
    ON CONFLICT (user_id, conversation_id) DO NOTHING;
    PERFORM 1 FROM public.conversations c
      WHERE c.user_id = m.user_id AND c.conversation_id = m.conversation_id
      FOR UPDATE;
    IF EXISTS (SELECT 1 FROM public.conversation_messages cm
                WHERE cm.user_id = m.user_id AND cm.conversation_id = m.conversation_id
                  AND cm.message_id = m.message_id) THEN
      CONTINUE;  -- recorded already: idempotent
    END IF;
    UPDATE public.conversations c
       SET messages = c.messages + 1,
           first_message_at = least(c.first_message_at, m.occurred_at),
           last_message_at = greatest(c.last_message_at, m.occurred_at),
           updated_at = now()
     WHERE c.user_id = m.user_id AND c.conversation_id = m.conversation_id
    RETURNING c.messages INTO next_seq;
    INSERT INTO public.conversation_messages (conversation_id, seq, user_id, message_id, role, text, occurred_at, source)
    VALUES (m.conversation_id, next_seq, m.user_id, m.message_id, m.role, m.text, m.occurred_at, m.source);
    n_recorded := n_recorded + 1;
  END LOOP;
  RETURN QUERY SELECT jsonb_array_length(p_messages), n_recorded;
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_record_messages(jsonb) FROM PUBLIC, anon;
GRANT EXECUTE ON FUNCTION public.user_memory_record_messages(jsonb) TO authenticated, service_role;

-- ---------------------------------------------------------------------------------------------
-- user_memory_erase: a user's conversations by user_id
-- ---------------------------------------------------------------------------------------------

-- Migration 012's function (same signature, same order, same rows reported); only the three
-- conversation deletes change: each table by its own user_id (the leading column of its primary
-- key), since joining on conversation_id alone would also match another user's conversation of
-- the same id. The conversations are still locked first, so a memory being written (its writer
-- holds the conversation's row lock) commits before the deletes below, each with a new
-- snapshot, see it.
CREATE OR REPLACE FUNCTION public.user_memory_erase(p_user_id uuid)
RETURNS TABLE (relation text, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
  heads bigint;
  snapshots bigint;
  activity bigint;
  kv_entries bigint;
  conversation_rows bigint;
  message_rows bigint;
  memory_rows bigint;
  item_rows bigint;
  embedding_rows bigint := 0;
  rating_rows bigint;
  digest_rows bigint;
BEGIN
  IF p_user_id IS NULL THEN
    RAISE EXCEPTION 'user_memory_erase: user id is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM 1 FROM public.user_memory_heads h WHERE h.user_id = p_user_id FOR UPDATE;
  -- Activity first: a summary in flight holds its activity rows locked, so this waits for it
  -- to commit, and the statements below (each with a new snapshot) then see its version too,
  -- even a first version that had no head row to lock yet.
  DELETE FROM public.user_activity a WHERE a.user_id = p_user_id;
  GET DIAGNOSTICS activity = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', p_user_id::text, true);
  DELETE FROM public.user_memory_snapshots s WHERE s.user_id = p_user_id;
  GET DIAGNOSTICS snapshots = ROW_COUNT;
  PERFORM set_config('user_memory.erase_user_id', '', true);
  DELETE FROM public.user_memory_heads h WHERE h.user_id = p_user_id;
  GET DIAGNOSTICS heads = ROW_COUNT;
  -- Key-value entries, expired or not.
  DELETE FROM public.user_memory_kv kv WHERE kv.user_id = p_user_id;
  GET DIAGNOSTICS kv_entries = ROW_COUNT;
  -- Conversations: memories, messages, then the conversations themselves, each by user_id.
  PERFORM 1 FROM public.conversations c WHERE c.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.conversation_memories cm WHERE cm.user_id = p_user_id;
  GET DIAGNOSTICS memory_rows = ROW_COUNT;
  DELETE FROM public.conversation_messages m WHERE m.user_id = p_user_id;
  GET DIAGNOSTICS message_rows = ROW_COUNT;
  DELETE FROM public.conversations c WHERE c.user_id = p_user_id;
  GET DIAGNOSTICS conversation_rows = ROW_COUNT;
  -- The companion layer and the search index.
  DELETE FROM public.memory_items i WHERE i.user_id = p_user_id;
  GET DIAGNOSTICS item_rows = ROW_COUNT;
  IF to_regclass('public.memory_embeddings') IS NOT NULL THEN
    EXECUTE 'DELETE FROM public.memory_embeddings e WHERE e.user_id = $1' USING p_user_id;
    GET DIAGNOSTICS embedding_rows = ROW_COUNT;
  END IF;
  DELETE FROM public.feedback_ratings f WHERE f.user_id = p_user_id;
  GET DIAGNOSTICS rating_rows = ROW_COUNT;
  DELETE FROM public.daily_digests d WHERE d.user_id = p_user_id;
  GET DIAGNOSTICS digest_rows = ROW_COUNT;
  RETURN QUERY VALUES ('user_memory_heads'::text, heads),
                      ('user_memory_snapshots'::text, snapshots),
                      ('user_activity'::text, activity),
                      ('user_memory_kv'::text, kv_entries),
                      ('conversation_memories'::text, memory_rows),
                      ('conversation_messages'::text, message_rows),
                      ('conversations'::text, conversation_rows),
                      ('memory_items'::text, item_rows),
                      ('memory_embeddings'::text, embedding_rows),
                      ('feedback_ratings'::text, rating_rows),
                      ('daily_digests'::text, digest_rows);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;
