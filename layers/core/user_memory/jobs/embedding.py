"""The after-write embedding, now in adapters/search.py (the composition root calls it, and imports
no job); named here only for jobs/worker.py's import, which moves with that module's next change."""

from user_memory.adapters.search import embed_after_write

__all__ = ["embed_after_write"]
