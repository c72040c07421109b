"""The HTTP API: routes, problem details, the caller's identity, the OpenAPI document."""
