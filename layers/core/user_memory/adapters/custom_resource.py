"""The answer to a CloudFormation custom resource request: one PUT of a JSON document to the
request's pre-signed URL (an S3 object), ended by a wall-clock deadline.

Until it arrives CloudFormation waits (up to the resource's ServiceTimeout), so the caller sends it
whatever happened; a PUT that fails on the way is tried once more, and a failure to send it is
raised (the invocation fails; the function has no asynchronous retries, see template.yaml).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from user_memory.adapters.http_deadline import time_left, within
from user_memory.errors import CustomResourceResponseFailed

# CloudFormation refuses a response document over 4096 bytes; the reason is cut to fit.
MAX_RESPONSE_BYTES = 4096
MAX_REASON_CHARS = 1000


def response_document(
    request: Any, *, status: Literal["SUCCESS", "FAILED"], reason: str, physical_id: str, data: dict[str, str]
) -> bytes:
    """The JSON CloudFormation expects, echoing the request's ids; the reason is one line."""
    line = " ".join(reason.split())[:MAX_REASON_CHARS]
    body = {
        "Status": status,
        "Reason": line,
        "PhysicalResourceId": physical_id,
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_resource_id,
        "NoEcho": False,
        "Data": data,
    }
    encoded = json.dumps(body).encode()
    if len(encoded) > MAX_RESPONSE_BYTES:  # only Data can make it so: drop it, keep the outcome
        encoded = json.dumps({**body, "Data": {}}).encode()
    return encoded


def send_response(url: str, document: bytes, *, seconds: float, attempts: int = 2) -> None:
    """PUT `document` to the pre-signed `url` within `seconds` in all; CustomResourceResponseFailed
    otherwise. A connection failure or a 5xx is tried again (nothing else retries: the function
    has no asynchronous retries, and without an answer CloudFormation waits its ServiceTimeout)."""
    import httpx2

    from user_memory.adapters.openai_calls import http_client  # its connections end by the deadline

    failure = "not sent"
    with within(seconds):
        for _ in range(attempts):
            left = time_left()
            if left is not None and left <= 0:
                break
            try:
                # An empty content type: the URL is signed without one (as AWS's cfn-response sends it).
                with http_client() as client:
                    response = client.put(url, content=document, headers={"content-type": ""}, timeout=left)
            except httpx2.HTTPError as err:
                failure = f"the response to CloudFormation was not sent: {type(err).__name__}"
                continue
            if response.status_code < 300:
                return
            failure = f"the response URL answered HTTP {response.status_code}"
            if response.status_code < 500:
                break
    raise CustomResourceResponseFailed(failure)
