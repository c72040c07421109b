"""The domain: documents, patching, the store's rules, messages, the pipeline. No I/O imports."""
