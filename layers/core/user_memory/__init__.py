"""user-memory: an evolving, versioned memory of every user of an AI product.

Rings: `domain` (documents, patching, the store's rules, the pipeline; no I/O), `adapters`
(PostgreSQL, in-memory, SQS, OpenAI), and the entry points' services (`runtime`, `worker`,
`fanout`) that the Lambda handlers in functions/ call.
"""
