"""Conversation memories: the conversation, its messages and memory (model), the ports, the
rule-based summarizer, the trigger's batches and one batch's run. No I/O: the store, the
summarizer and the sender are ports."""
