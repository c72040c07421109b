"""Local stand-ins for the cloud and the command line: embedded PostgreSQL (`embedded`), the
poller that plays Lambda's SQS event source (`poller`), the demo (`demo`) and `user-memory` (`cli`).

Not part of the Lambda layer: these need the `local` extra (pgserver, moto, tqdm).
"""
