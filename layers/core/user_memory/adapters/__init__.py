"""Adapters: PostgreSQL, in-memory, SQS and OpenAI implementations of the domain's ports."""
