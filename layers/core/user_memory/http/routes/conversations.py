"""The caller's conversations (/me/conversations), newest message first, each with its memory."""

from aws_lambda_powertools.event_handler import Request
from aws_lambda_powertools.event_handler.api_gateway import Router

from user_memory.http import models, responses
from user_memory.http.context import me
from user_memory.http.openapi import responses as answers
from user_memory.http.params import ConversationCursor, ConversationLimit

router = Router()  # under /me/conversations


@router.get("/", responses=answers(models.Conversations), tags=["conversations"])
def list_conversations(
    request: Request, limit: ConversationLimit = 20, after: ConversationCursor = None
) -> models.Conversations:
    """The caller's conversations, newest message first, each with its memory."""
    with me(request) as session:
        return responses.conversations(session.overview, limit, after)
