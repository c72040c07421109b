"""Search: the caller's memory items, and (operators) item texts across every user."""

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from user_memory.http import models, responses
from user_memory.http.context import dependencies, me, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers

router = Router()

SearchQuery = Annotated[str, Query(min_length=1, max_length=500, description="What to look for.")]
SearchK = Annotated[int, Query(ge=1, le=100, description="How many items.")]
SearchMode = Annotated[
    Literal["auto", "fts", "vector", "fused"],
    Query(description="auto: fused when embeddings are configured, else full text."),
]


@router.get("/me/memory/search", responses=answers(models.SearchResults), tags=["memory"])
def search_memory(request: Request, q: SearchQuery, k: SearchK = 10, mode: SearchMode = "auto") -> models.SearchResults:
    """The items of the caller's memory (document leaves and elements, each with its JSON Pointer and
    the version that last changed it) that best match `q`."""
    with me(request) as session:
        return responses.search(session.search, q, k, mode)


@router.get("/admin/memory/search", responses=answers(models.OperatorSearchResults), tags=["admin"])
def operator_search(request: Request, q: SearchQuery, k: SearchK = 10) -> models.OperatorSearchResults:
    """Operators: the nearest item texts across every user (the HNSW index; embeddings required)."""
    operator_caller(request, "search across users")
    tasks = dependencies(request).tasks
    if tasks is None or not hasattr(tasks, "search_all"):
        raise not_enabled("search across users")
    found = tasks.search_all(q, k)
    return models.OperatorSearchResults(query=q, items=[models.OperatorSearchHit(**h) for h in found])
