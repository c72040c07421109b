"""Fixtures the integration tier shares (fresh_db, an empty database next to the session's, is in
tests/conftest.py: the migrate function's tests use it too)."""
