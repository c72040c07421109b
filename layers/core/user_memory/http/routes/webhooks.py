"""Operators: webhook endpoints that receive memory-changed events (register, list, disable,
enable, delete; each logged). The relay (jobs/events.py) sends; these routes only manage."""

import uuid
from typing import Annotated, Protocol, runtime_checkable

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from user_memory.domain.events import Endpoint, WebhookRegistry
from user_memory.errors import UnknownWebhook
from user_memory.http import models
from user_memory.http.context import dependencies, not_enabled, operator_caller
from user_memory.http.openapi import responses as answers

router = Router()  # under /admin/webhooks

WebhookId = Annotated[str, Path(description="The endpoint's id (a UUID).")]


@runtime_checkable
class HasWebhooks(Protocol):
    """Sessions that can also manage webhook endpoints (ApiServices)."""

    @property
    def webhooks(self) -> WebhookRegistry: ...


def _registry(request: Request, action: str) -> WebhookRegistry:
    """The registry, for an operator (Forbidden otherwise; the action is logged)."""
    request.context["operator"] = operator_caller(request, action).subject
    sessions = dependencies(request).sessions
    if not isinstance(sessions, HasWebhooks):
        raise not_enabled("manage webhooks")
    return sessions.webhooks


def _id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UnknownWebhook("no webhook endpoint has that id") from None


def _model(endpoint: Endpoint) -> models.Webhook:
    return models.Webhook(
        id=str(endpoint.id),
        url=endpoint.url,
        description=endpoint.description,
        enabled=endpoint.enabled,
        disabled_reason=endpoint.disabled_reason,
        failures=endpoint.failures,
        failing_since=endpoint.failing_since,
        next_attempt_at=endpoint.next_attempt_at,
        last_error=endpoint.last_error,
        last_delivered_at=endpoint.last_delivered_at,
        created_at=endpoint.created_at,
    )


@router.post("/", responses=answers(models.WebhookCreated), tags=["admin"])
def register_webhook(request: Request, new: Annotated[models.WebhookNew, Body()]) -> models.WebhookCreated:
    """Operators: register an endpoint; its signing secret is answered once (kept in Secrets Manager)."""
    registry = _registry(request, "register webhook")
    endpoint, secret = registry.register(new.url, new.description, request.context["operator"])
    return models.WebhookCreated(webhook=_model(endpoint), secret=secret)


@router.get("/", responses=answers(models.Webhooks), tags=["admin"])
def list_webhooks(request: Request) -> models.Webhooks:
    """Operators: every endpoint with its state (a disabled one says why)."""
    return models.Webhooks(webhooks=[_model(e) for e in _registry(request, "list webhooks").list()])


@router.get("/<webhook_id>", responses=answers(models.Webhook), tags=["admin"])
def get_webhook(request: Request, webhook_id: WebhookId) -> models.Webhook:
    """Operators: one endpoint with its state."""
    return _model(_registry(request, "read webhook").get(_id(webhook_id)))


@router.post("/<webhook_id>/disable", responses=answers(models.Webhook), tags=["admin"])
def disable_webhook(request: Request, webhook_id: WebhookId) -> models.Webhook:
    """Operators: stop sending to an endpoint (its events wait while they are kept)."""
    return _model(_registry(request, "disable webhook").set_enabled(_id(webhook_id), False))


@router.post("/<webhook_id>/enable", responses=answers(models.Webhook), tags=["admin"])
def enable_webhook(request: Request, webhook_id: WebhookId) -> models.Webhook:
    """Operators: send to an endpoint again, its failures and backoff cleared."""
    return _model(_registry(request, "enable webhook").set_enabled(_id(webhook_id), True))


@router.delete("/<webhook_id>", responses=answers(models.WebhookDeleted), tags=["admin"])
def delete_webhook(request: Request, webhook_id: WebhookId) -> models.WebhookDeleted:
    """Operators: remove an endpoint, its delivery marks and its secret."""
    endpoint_id = _id(webhook_id)
    _registry(request, "delete webhook").delete(endpoint_id)
    return models.WebhookDeleted(id=str(endpoint_id), deleted=True)
