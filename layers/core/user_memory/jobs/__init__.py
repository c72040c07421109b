"""Where work enters besides the HTTP API: the worker's batch, the fan-out, the daily retention,
the companion's nightly part, the conversation-memory trigger and the after-write embedding.
Each job takes its services from the composition root (`user_memory.runtime`)."""
