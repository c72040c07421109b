"""The caller's memory document (/me/memory): read it (head, past version, time), follow it, edit it,
search its items, and the console's figures and check of it."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from pydantic import JsonValue

from user_memory.domain.memory.document import document_problems
from user_memory.domain.memory.render import DEFAULT_RENDER_BUDGET, MAX_RENDER_BUDGET
from user_memory.http import models, responses
from user_memory.http.bodies import check_json_patch, json_body, media_type
from user_memory.http.context import caller, dependencies, edit, me, request_refresh
from user_memory.http.openapi import responses as answers
from user_memory.http.params import (
    AsOf,
    Before,
    Days,
    From,
    IdemKey,
    IfMatch,
    Limit,
    SearchK,
    SearchMode,
    SearchQuery,
    Since,
    To,
    Version,
)
from user_memory.http.problems import UNSUPPORTED_MEDIA, HttpProblem

router = Router()  # under /me/memory

Budget = Annotated[int, Query(ge=1, le=MAX_RENDER_BUDGET, description="Token budget of the text.")]
Section = Annotated[str | None, Query(min_length=1, max_length=100, description="One section; none: all.")]


@router.get("/", responses=answers(models.Memory, etag=True), tags=["memory"])
def get_memory(request: Request, version: Version = None, as_of: AsOf = None) -> Response[models.Memory]:
    """The memory document: the head, a past version, or as it was at a time."""
    with me(request) as session:
        return responses.read(session.memory, version, as_of)


@router.get("/history", responses=answers(models.History), tags=["memory"])
def get_history(request: Request, limit: Limit = 50, before: Before = None) -> models.History:
    """The versions, newest first, in pages."""
    with me(request) as session:
        return responses.history(session.memory, limit, before)


@router.get("/diff", responses=answers(models.Diff), tags=["memory"])
def get_diff(request: Request, from_version: From, to_version: To) -> models.Diff:
    """One RFC 6902 patch from version `from` to version `to`."""
    with me(request) as session:
        return responses.diff(session.memory, from_version, to_version)


@router.get("/changes", responses=answers(models.Changes, etag=True), tags=["memory"])
def get_changes(request: Request, since: Since) -> Response[models.Changes]:
    """One patch from `since` to the head: the feed a cache polls to stay current."""
    with me(request) as session:
        return responses.changes(session.memory, since)


@router.get("/prompt", responses=answers(models.Prompt, etag=True), tags=["agent"])
def get_prompt(request: Request, budget_tokens: Budget = DEFAULT_RENDER_BUDGET) -> Response[models.Prompt]:
    """The head rendered as a compact block for a system prompt, cut to a token budget; then, marked as recent,
    what conversations taught since the last summary (their memories no version took in yet)."""
    with me(request) as session:
        include_sensitive = dependencies(request).settings.prompt_include_sensitive
        head, rendered = session.memory.prompt(
            budget_tokens, include_sensitive=include_sensitive
        )  # one read of the head
        body = models.Prompt(
            user_id=str(session.user_id), version=head.version, text=rendered.text, recent=rendered.recent
        )
    return Response(200, "application/json", body, headers={"ETag": rendered.etag(head.version)})


@router.patch("/", responses=answers(models.Written, etag=True), tags=["memory"])
def patch_memory(
    request: Request, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.Written]:
    """Edit with RFC 6902 (application/json-patch+json) or RFC 7396 (application/merge-patch+json)."""
    content_type = media_type(request.headers)
    if content_type not in (models.JSON_PATCH, models.MERGE_PATCH):
        raise HttpProblem(UNSUPPORTED_MEDIA, f"PATCH takes {models.JSON_PATCH} or {models.MERGE_PATCH}")
    change = edit(request, if_match, idempotency_key_)
    body = json_body(request, dependencies(request).settings.max_document_bytes * 2)
    with me(request) as session:
        if content_type == models.JSON_PATCH:
            result = session.memory.apply_json_patch(check_json_patch(body), change)
        else:
            result = session.memory.apply_merge_patch(body, change)
        return responses.written(session.user_id, result)


@router.put("/", responses=answers(models.Written, etag=True), tags=["memory"])
def put_memory(
    request: Request,
    document: Annotated[dict[str, Any], Body(description="The whole new document.")],
    if_match: IfMatch = None,
    idempotency_key_: IdemKey = None,
) -> Response[models.Written]:
    """Replace the whole document (validated against the deployment's schema)."""
    change = edit(request, if_match, idempotency_key_)
    with me(request) as session:
        return responses.written(session.user_id, session.memory.replace(document, change))


@router.post("/revert", responses=answers(models.Written, etag=True), tags=["memory"])
def revert_memory(
    request: Request,
    revert: Annotated[models.Revert, Body()],
    if_match: IfMatch = None,
    idempotency_key_: IdemKey = None,
) -> Response[models.Written]:
    """A new version whose document is an older version's; history keeps everything."""
    change = edit(request, if_match, idempotency_key_, action=f"revert to {revert.version}")
    with me(request) as session:
        return responses.written(session.user_id, session.memory.revert(revert.version, change))


@router.delete("/", responses=answers(models.Written, etag=True), tags=["memory"])
def prune_memory(
    request: Request, section: Section = None, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.Written]:
    """Prune one section (or every section) as a new version; history keeps what was there."""
    change = edit(request, if_match, idempotency_key_, action="prune" + (f" {section}" if section else ""))
    with me(request) as session:
        return responses.written(session.user_id, session.memory.prune(section, change))


@router.post("/refresh", responses=answers(models.RefreshQueued, status=202), tags=["memory"])
def refresh_memory(request: Request) -> Response[models.RefreshQueued]:
    """Summarize the caller's pending activity now (a refresh_user message with run key ondemand:<time>): 202
    with its run key; within REFRESH_MIN_INTERVAL_SECONDS of the last one, 202 with that one's run key."""
    user = caller(request)
    request.context["user_id"] = str(user.user_id)
    return responses.refresh_queued(request_refresh(request, user.user_id, "user"))


@router.get("/stats", responses=answers(models.Stats), tags=["memory"])
def get_stats(request: Request, days: Days = 90) -> models.Stats:
    """Figures to plot: the size of the newest versions, and per day the versions, the summaries'
    applied and refused edits and their LLM tokens."""
    with me(request) as session:
        return responses.stats(session.overview, days)


@router.post("/validate", responses=answers(models.DocumentCheck), tags=["memory"])
def validate_memory(
    request: Request, document: Annotated[dict[str, JsonValue], Body(description="A whole document.")]
) -> models.DocumentCheck:
    """Check a document against the deployment's schema and size limit without writing it: the
    problems, field by field (the console shows them before a save)."""
    settings = dependencies(request).settings
    caller(request)  # a caller like any other route's, though nothing is read
    problems = document_problems(document, settings.document_schema, max_bytes=settings.max_document_bytes)
    return models.DocumentCheck(
        valid=not problems, problems=[models.DocumentProblem(path=p, message=m) for p, m in problems]
    )


@router.get("/search", responses=answers(models.SearchResults), tags=["memory"])
def search_memory(request: Request, q: SearchQuery, k: SearchK = 10, mode: SearchMode = "auto") -> models.SearchResults:
    """The items of the caller's memory (document leaves and elements, each with its JSON Pointer and
    the version that last changed it) that best match `q`."""
    with me(request) as session:
        return responses.search(session.search, q, k, mode)
