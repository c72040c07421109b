-- Conversation memories: a chat product's conversations, their messages, and one structured
-- memory per conversation, written once the conversation has gone quiet.
--
--   conversations          one row per conversation: its owner, how many messages it has (each
--                          message's number within it), when the first and the last occurred,
--                          and through which message its memory goes (memory_through, NULL: none).
--   conversation_messages  the messages, idempotent on (conversation_id, message_id); seq is the
--                          message's number in its conversation, in the order they were recorded.
--   conversation_memories  one row per conversation: the memory (JSON), the last message it
--                          covers (seq, id, time), the model that wrote it, created and updated.
--
-- Messages are not user_activity rows: the daily summary must not fold raw chat lines into the
-- user's document (it will take the conversation memories instead), and rows it never marks
-- summarized would stay in user_activity's partial index of unsummarized rows for ever.
--
-- A conversation id is global (GENERATE_MEMORY_BATCH names conversations by id alone) and
-- belongs to the user who recorded its first message; a message naming another user's
-- conversation is refused (SQLSTATE 42501). The composite foreign keys keep every message's
-- and memory's user_id equal to its conversation's, so row-level security on user_id and the
-- erase by user see exactly the conversation's rows.
--
-- The trigger ("quiet for longer than the threshold, and no memory or messages newer than it")
-- is served by idx_conversations_pending: a partial index over the conversations whose memory
-- does not cover their last message, in (last_message_at, conversation_id) order, so the query
--   SELECT conversation_id, last_message_at FROM conversations
--    WHERE coalesce(memory_through, 0) < messages AND last_message_at < $cutoff
--      AND (last_message_at, conversation_id) > ($after_at, $after_id)
--    ORDER BY last_message_at, conversation_id LIMIT $page
-- reads only pending conversations (an index-only scan), never the ones already summarized.
--
-- Who may do what (tests/integration/test_conversations_sql.py and test_security.py prove it):
--   anon           nothing.
--   authenticated  SELECT of its own rows of the three tables (RLS: auth.uid() = user_id);
--                  records its own messages only through user_memory_record_messages().
--   service_role   SELECT, INSERT, UPDATE of the three tables (no DELETE: rows leave through
--                  user_memory_erase); user_memory_record_messages() for any user.
--   PUBLIC         nothing.
-- user_memory_erase (and so user_memory_erase_me) now removes a user's conversations too.

CREATE TABLE conversations (
  -- "C": byte order, the order of the trigger's keyset pages.
  conversation_id text COLLATE "C" NOT NULL,
  user_id uuid NOT NULL,
  messages integer NOT NULL DEFAULT 0,
  first_message_at timestamptz NOT NULL,
  last_message_at timestamptz NOT NULL,
  memory_through integer NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT conversations_pkey PRIMARY KEY (conversation_id),
  -- Serves the erase, the export and RLS by user, and the messages' and memories' foreign keys.
  CONSTRAINT conversations_user_conversation_key UNIQUE (user_id, conversation_id),
  -- 1 to 200 characters, no control characters (text cannot hold U+0000 at all).
  CONSTRAINT conversations_id_check
    CHECK (char_length(conversation_id) BETWEEN 1 AND 200 AND conversation_id !~ E'[\\x01-\\x1f\\x7f-\\x9f]'),
  CONSTRAINT conversations_messages_check CHECK (messages >= 0),
  CONSTRAINT conversations_memory_through_check
    CHECK (memory_through IS NULL OR memory_through BETWEEN 1 AND messages)
);

CREATE INDEX idx_conversations_pending
  ON conversations (last_message_at, conversation_id)
  WHERE coalesce(memory_through, 0) < messages;

CREATE TABLE conversation_messages (
  conversation_id text COLLATE "C" NOT NULL,
  seq integer NOT NULL,
  user_id uuid NOT NULL,
  message_id text COLLATE "C" NOT NULL,
  role text NOT NULL,
  text text NOT NULL,
  occurred_at timestamptz NOT NULL,
  source text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT conversation_messages_pkey PRIMARY KEY (conversation_id, seq),
  CONSTRAINT conversation_messages_message_key UNIQUE (conversation_id, message_id),
  CONSTRAINT conversation_messages_conversation_fkey FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE,
  CONSTRAINT conversation_messages_seq_check CHECK (seq >= 1),
  CONSTRAINT conversation_messages_id_check
    CHECK (char_length(message_id) BETWEEN 1 AND 300 AND message_id !~ E'[\\x01-\\x1f\\x7f-\\x9f]'),
  CONSTRAINT conversation_messages_role_check CHECK (role IN ('user', 'assistant', 'system', 'tool')),
  -- The service limits an activity's payload to 16 KiB of compact JSON; the text is part of it.
  CONSTRAINT conversation_messages_text_check CHECK (octet_length(text) <= 16384),
  CONSTRAINT conversation_messages_source_check CHECK (char_length(source) BETWEEN 1 AND 100)
);

CREATE TABLE conversation_memories (
  conversation_id text COLLATE "C" NOT NULL,
  user_id uuid NOT NULL,
  memory jsonb NOT NULL,
  last_message_seq integer NOT NULL,
  last_message_id text COLLATE "C" NOT NULL,
  last_message_at timestamptz NOT NULL,
  model text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT conversation_memories_pkey PRIMARY KEY (conversation_id),
  CONSTRAINT conversation_memories_conversation_fkey FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE,
  CONSTRAINT conversation_memories_memory_check
    CHECK (jsonb_typeof(memory) = 'object' AND octet_length(memory::text) <= 65536),
  CONSTRAINT conversation_memories_seq_check CHECK (last_message_seq >= 1)
);

-- "A user's conversation memories updated in a window" (the daily summary's input).
CREATE INDEX idx_conversation_memories_user_updated ON conversation_memories (user_id, updated_at);

COMMENT ON TABLE conversations IS 'A chat conversation: its owner, message count and times, and how far its memory goes.';
COMMENT ON COLUMN conversations.messages IS 'Messages recorded; each message''s seq is its number, in the order recorded.';
COMMENT ON COLUMN conversations.last_message_at IS 'The latest occurred_at of its messages: the conversation is quiet from then on.';
COMMENT ON COLUMN conversations.memory_through IS 'The seq of the last message its memory covers; NULL: no memory yet.';
COMMENT ON TABLE conversation_messages IS 'The messages of a conversation, idempotent on (conversation_id, message_id).';
COMMENT ON TABLE conversation_memories IS 'One structured memory per conversation (what was discussed, learned, decided, left open, tone).';
COMMENT ON COLUMN conversation_memories.last_message_seq IS 'The seq of the last message this memory covers.';

-- ---------------------------------------------------------------------------------------------
-- Privileges and row-level security
-- ---------------------------------------------------------------------------------------------

-- Supabase's default privileges grant ALL on new tables to anon, authenticated and service_role:
-- revoke everything, then grant exactly what each role needs.
REVOKE ALL ON conversations, conversation_messages, conversation_memories
  FROM PUBLIC, anon, authenticated, service_role;
GRANT SELECT ON conversations, conversation_messages, conversation_memories TO authenticated;
GRANT SELECT, INSERT, UPDATE ON conversations, conversation_messages, conversation_memories TO service_role;

ALTER TABLE conversations ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversation_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversation_memories ENABLE ROW LEVEL SECURITY;

CREATE POLICY "Users can view own conversations"
  ON conversations FOR SELECT
  USING (auth.uid() = user_id);

CREATE POLICY "Users can view own conversation messages"
  ON conversation_messages FOR SELECT
  USING (auth.uid() = user_id);

CREATE POLICY "Users can view own conversation memories"
  ON conversation_memories FOR SELECT
  USING (auth.uid() = user_id);

-- ---------------------------------------------------------------------------------------------
-- user_memory_record_messages: messages in, idempotently (the service, and end users for themselves)
-- ---------------------------------------------------------------------------------------------

-- p_messages is a JSON array of {user_id, conversation_id, message_id, role, text, occurred_at,
-- source}. Each message new to its conversation gets the next seq, moves the conversation's
-- message count and times, and so makes its memory stale; a message whose (conversation_id,
-- message_id) is recorded already is ignored. Messages are taken in (conversation_id,
-- occurred_at, message_id) order, so concurrent callers lock conversations in the same order.
-- Returns (received, recorded). Refused with SQLSTATE 42501: an end user's message for another
-- user (every user_id must be auth.uid()), and anyone's message naming a conversation that
-- belongs to another user. p_messages not an array: 22023. The whole call is one statement:
-- all of it is recorded or none.
--
-- SECURITY DEFINER: end users hold no INSERT or UPDATE on the tables (they could otherwise
-- rewrite a conversation's counters and hide it from the trigger); this function is their only
-- way in. The caller is identified as user_memory_append does (migration 006).
CREATE FUNCTION public.user_memory_record_messages(p_messages jsonb)
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
  owner uuid;
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
     ORDER BY x.e ->> 'conversation_id' COLLATE "C", (x.e ->> 'occurred_at')::timestamptz,
              x.e ->> 'message_id' COLLATE "C", x.n
  LOOP
    IF NOT trusted AND m.user_id IS DISTINCT FROM claimed THEN
      RAISE EXCEPTION 'user_memory_record_messages: may only record own messages'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO public.conversations AS c (conversation_id, user_id, first_message_at, last_message_at)
    VALUES (m.conversation_id, m.user_id, m.occurred_at, m.occurred_at)
    ON CONFLICT (conversation_id) DO NOTHING;
    SELECT c.user_id INTO owner FROM public.conversations c WHERE c.conversation_id = m.conversation_id FOR UPDATE;
    IF owner IS DISTINCT FROM m.user_id THEN
      RAISE EXCEPTION 'user_memory_record_messages: conversation % belongs to another user', quote_literal(m.conversation_id)
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT 1 FROM public.conversation_messages cm
                WHERE cm.conversation_id = m.conversation_id AND cm.message_id = m.message_id) THEN
      CONTINUE;  -- recorded already: idempotent
    END IF;
    UPDATE public.conversations c
       SET messages = c.messages + 1,
           first_message_at = least(c.first_message_at, m.occurred_at),
           last_message_at = greatest(c.last_message_at, m.occurred_at),
           updated_at = now()
     WHERE c.conversation_id = m.conversation_id
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
-- user_memory_erase: also the user's conversations, their messages and memories
-- ---------------------------------------------------------------------------------------------

-- Migration 008's function (same signature, same body, same order), then the user's
-- conversations: their rows are locked first, so a memory being written (its writer holds the
-- conversation's row lock) commits before the deletes below, each with a new snapshot, see it.
-- Reported as three more rows: conversation_memories, conversation_messages, conversations.
-- CREATE OR REPLACE keeps its owner and grants; they are restated below all the same.
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
  -- Conversations: memories, messages, then the conversations themselves.
  PERFORM 1 FROM public.conversations c WHERE c.user_id = p_user_id FOR UPDATE;
  DELETE FROM public.conversation_memories cm
   USING public.conversations c
   WHERE c.user_id = p_user_id AND cm.conversation_id = c.conversation_id;
  GET DIAGNOSTICS memory_rows = ROW_COUNT;
  DELETE FROM public.conversation_messages m
   USING public.conversations c
   WHERE c.user_id = p_user_id AND m.conversation_id = c.conversation_id;
  GET DIAGNOSTICS message_rows = ROW_COUNT;
  DELETE FROM public.conversations c WHERE c.user_id = p_user_id;
  GET DIAGNOSTICS conversation_rows = ROW_COUNT;
  RETURN QUERY VALUES ('user_memory_heads'::text, heads),
                      ('user_memory_snapshots'::text, snapshots),
                      ('user_activity'::text, activity),
                      ('user_memory_kv'::text, kv_entries),
                      ('conversation_memories'::text, memory_rows),
                      ('conversation_messages'::text, message_rows),
                      ('conversations'::text, conversation_rows);
END
$$;

REVOKE ALL ON FUNCTION public.user_memory_erase(uuid) FROM PUBLIC, anon, authenticated;
GRANT EXECUTE ON FUNCTION public.user_memory_erase(uuid) TO service_role;
