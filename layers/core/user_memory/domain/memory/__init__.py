"""The memory document: its schemas, RFC 6902 patching, the store's rules (repository), the
agent's tools and the memory rendered for a prompt."""
