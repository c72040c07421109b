"""Conversation memories: the schema, the messages, the trigger's batches and one batch's run.

A chat product records each conversation's messages (an activity of kind `message` whose
payload names a `conversation_id`, on the queue or `POST /me/activity`). A conversation is the
pair (user, conversation id): each user names its own conversations, and two users using the same
id have two conversations (`ConversationKey`). Once a conversation has been quiet for longer than
the inactivity threshold and has no memory, or messages newer than its memory, the trigger sends
its key to the worker queue in a GENERATE_MEMORY_BATCH message; the worker summarizes each
conversation of the batch into a `ConversationMemory` and upserts it.

Each item of a batch is isolated: one that is malformed is refused alone, one that fails does not
stop the others, and the caller re-sends the failed ones (`BatchRun.failed_keys`). A conversation
whose memory already covers its last message writes nothing and calls no model, so a re-run or a
duplicate message is a read, never a second memory.

The modules: model (the conversation, its messages and memory), ports (the store, the summarizer,
the sender, the clock), summarizer (prompt lines and the rule-based summarizer), trigger (batches
and the trigger's run), batch (one batch's run). No I/O here: the store, the summarizer and the
sender are ports.
"""
