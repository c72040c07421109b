"""Operators' search across every user's item texts (/admin/memory/search); a user's own search is
the memory's (/me/memory/search), an operator's of one user the admin views'."""

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router

from user_memory.http import models
from user_memory.http.context import dependencies, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers
from user_memory.http.params import SearchK, SearchQuery

router = Router()  # under /admin/memory


@router.get("/search", responses=answers(models.OperatorSearchResults), tags=["admin"])
def operator_search(request: Request, q: SearchQuery, k: SearchK = 10) -> models.OperatorSearchResults:
    """Operators: the nearest item texts across every user (the HNSW index; embeddings required)."""
    operator_caller(request, "search across users")
    tasks = dependencies(request).tasks
    if tasks is None or not hasattr(tasks, "search_all"):
        raise not_enabled("search across users")
    found = tasks.search_all(q, k)
    return models.OperatorSearchResults(query=q, items=[models.OperatorSearchHit(**h) for h in found])
