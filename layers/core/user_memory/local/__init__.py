"""Local stand-ins for the cloud: embedded PostgreSQL, the Lambda SQS poller, demo data."""
