"""Logger, Tracer and Metrics, built once for the whole service.

Logs carry ids, counts, sizes and timings only, never document or activity content.
"""

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "user-memory"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="UserMemory", service=SERVICE)
