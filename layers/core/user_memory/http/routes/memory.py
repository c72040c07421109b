"""The caller's memory document: read it (head, past version, time), follow it, edit it."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from user_memory.domain.memory.render import DEFAULT_RENDER_BUDGET, MAX_RENDER_BUDGET, render_memory
from user_memory.http import models, responses
from user_memory.http.bodies import check_json_patch, json_body, media_type
from user_memory.http.context import dependencies, edit, me
from user_memory.http.openapi import responses as answers
from user_memory.http.params import AsOf, Before, From, IdemKey, IfMatch, Limit, Since, To, Version
from user_memory.http.problems import UNSUPPORTED_MEDIA, HttpProblem

router = Router()

Budget = Annotated[int, Query(ge=1, le=MAX_RENDER_BUDGET, description="Token budget of the text.")]
Section = Annotated[str | None, Query(min_length=1, max_length=100, description="One section; none: all.")]


@router.get("/me/memory", responses=answers(models.Memory, etag=True), tags=["memory"])
def get_memory(request: Request, version: Version = None, as_of: AsOf = None) -> Response[models.Memory]:
    """The memory document: the head, a past version, or as it was at a time."""
    with me(request) as service:
        return responses.read(service, version, as_of)


@router.get("/me/memory/history", responses=answers(models.History), tags=["memory"])
def get_history(request: Request, limit: Limit = 50, before: Before = None) -> models.History:
    """The versions, newest first, in pages."""
    with me(request) as service:
        return responses.history(service, limit, before)


@router.get("/me/memory/diff", responses=answers(models.Diff), tags=["memory"])
def get_diff(request: Request, from_version: From, to_version: To) -> models.Diff:
    """One RFC 6902 patch from version `from` to version `to`."""
    with me(request) as service:
        return responses.diff(service, from_version, to_version)


@router.get("/me/memory/changes", responses=answers(models.Changes, etag=True), tags=["memory"])
def get_changes(request: Request, since: Since) -> Response[models.Changes]:
    """One patch from `since` to the head: the feed a cache polls to stay current."""
    with me(request) as service:
        return responses.changes(service, since)


@router.get("/me/memory/prompt", responses=answers(models.Prompt, etag=True), tags=["agent"])
def get_prompt(request: Request, budget_tokens: Budget = DEFAULT_RENDER_BUDGET) -> Response[models.Prompt]:
    """The head rendered as a compact block for a system prompt, cut to a token budget."""
    with me(request) as service:
        head = service.read()  # one read: the text is the version the ETag names
        include_sensitive = dependencies(request).settings.prompt_include_sensitive
        text = render_memory(
            service.prompt_view(head.document),
            budget_tokens,
            schema=service.schema,
            include_sensitive=include_sensitive,
        )
        body = models.Prompt(user_id=str(service.user_id), version=head.version, text=text)
    return Response(200, "application/json", body, headers={"ETag": responses.etag(head.version)})


@router.patch("/me/memory", responses=answers(models.Written, etag=True), tags=["memory"])
def patch_memory(
    request: Request, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.Written]:
    """Edit with RFC 6902 (application/json-patch+json) or RFC 7396 (application/merge-patch+json)."""
    content_type = media_type(request.headers)
    if content_type not in (models.JSON_PATCH, models.MERGE_PATCH):
        raise HttpProblem(UNSUPPORTED_MEDIA, f"PATCH takes {models.JSON_PATCH} or {models.MERGE_PATCH}")
    change = edit(request, if_match, idempotency_key_)
    body = json_body(request, dependencies(request).settings.max_document_bytes * 2)
    with me(request) as service:
        if content_type == models.JSON_PATCH:
            result = service.apply_json_patch(check_json_patch(body), change)
        else:
            result = service.apply_merge_patch(body, change)
        return responses.written(service.user_id, result)


@router.put("/me/memory", responses=answers(models.Written, etag=True), tags=["memory"])
def put_memory(
    request: Request,
    document: Annotated[dict[str, Any], Body(description="The whole new document.")],
    if_match: IfMatch = None,
    idempotency_key_: IdemKey = None,
) -> Response[models.Written]:
    """Replace the whole document (validated against the deployment's schema)."""
    change = edit(request, if_match, idempotency_key_)
    with me(request) as service:
        return responses.written(service.user_id, service.replace(document, change))


@router.post("/me/memory/revert", responses=answers(models.Written, etag=True), tags=["memory"])
def revert_memory(
    request: Request,
    revert: Annotated[models.Revert, Body()],
    if_match: IfMatch = None,
    idempotency_key_: IdemKey = None,
) -> Response[models.Written]:
    """A new version whose document is an older version's; history keeps everything."""
    change = edit(request, if_match, idempotency_key_, action=f"revert to {revert.version}")
    with me(request) as service:
        return responses.written(service.user_id, service.revert(revert.version, change))


@router.delete("/me/memory", responses=answers(models.Written, etag=True), tags=["memory"])
def prune_memory(
    request: Request, section: Section = None, if_match: IfMatch = None, idempotency_key_: IdemKey = None
) -> Response[models.Written]:
    """Prune one section (or every section) as a new version; history keeps what was there."""
    change = edit(request, if_match, idempotency_key_, action="prune" + (f" {section}" if section else ""))
    with me(request) as service:
        return responses.written(service.user_id, service.prune(section, change))
