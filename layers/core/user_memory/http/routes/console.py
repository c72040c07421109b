"""The console: a page to see and steer a memory, served from the package (no build step).

`/console` is the page, `/console/<file>` its scripts and styles (plain ES modules in
`user_memory/http/console/`), `/console/config.json` how it signs in; `/` sends a browser to the
console (and names Swagger UI), `/favicon.ico` is an empty answer. None of them needs a token
(the page holds no data; it calls the API with the caller's token like any client). Every answer
carries a strict Content-Security-Policy: scripts only from this origin, no inline script or
style, no framing; the page renders memory content as text, never as markup.
"""

from functools import cache
from importlib.resources import files
from urllib.parse import urlsplit

from aws_lambda_powertools.event_handler import Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from user_memory.errors import NotFound
from user_memory.http.context import dependencies

router = Router()

ASSETS = "console"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


@cache
def shipped() -> frozenset[str]:
    """The console's file names, listed once: the only names a request may read."""
    folder = files("user_memory.http").joinpath(ASSETS)
    return frozenset(f.name for f in folder.iterdir() if f.is_file() and _suffix(f.name) in _TYPES)


def _suffix(name: str) -> str:
    return name[name.rfind(".") :] if "." in name else ""


def asset(name: str) -> tuple[str, str] | None:
    """A file of the console (its text and media type), or None for a name that is not one.

    Any other name is answered without touching the filesystem (a name longer than the system's
    limit would otherwise raise), and only shipped files are cached (unknown names never grow it).
    """
    if name not in shipped():
        return None
    return _read(name)


@cache
def _read(name: str) -> tuple[str, str]:
    """A shipped file, read once per process."""
    return files("user_memory.http").joinpath(ASSETS, name).read_text(encoding="utf-8"), _TYPES[_suffix(name)]


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def security_headers(request: Request) -> dict[str, str]:
    """The console's headers: a CSP without inline scripts, calls only to this origin and the issuer's."""
    settings = dependencies(request).settings
    origins = [
        o for o in (_origin(settings.console_oidc_issuer), *map(_origin, settings.console_connect_origins.split())) if o
    ]
    connect = " ".join(["'self'", *dict.fromkeys(origins)])
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect}; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


# A browser at the root gets the console (and the body, for a client that does not follow, names
# the console and Swagger UI). Relative links: under a named API Gateway stage the root is
# /<stage>/, and "console" resolves below it.
_ROOT_PAGE = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>user-memory</title></head><body>'
    '<p>user-memory: the <a href="console">console</a>, the API in <a href="swagger">Swagger UI</a>, '
    'its <a href="openapi.json">OpenAPI document</a>.</p></body></html>\n'
)


@router.get("/", include_in_schema=False)
def root(request: Request) -> Response[str]:
    headers = {**security_headers(request), "Location": "console"}
    return Response(302, "text/html; charset=utf-8", _ROOT_PAGE, headers=headers)


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response[str]:
    """No icon: an empty answer a browser caches, instead of a 401 on every page load."""
    return Response(204, "image/x-icon", "", headers={"Cache-Control": "public, max-age=86400"})


@router.get("/console", include_in_schema=False)
def console_page(request: Request) -> Response[str]:
    return _file(request, "index.html")


@router.get("/console/config.json", include_in_schema=False)
def console_config(request: Request) -> Response[dict[str, str]]:
    """How the page signs in: OIDC (issuer, client id, scopes) or, without them, a development token."""
    settings = dependencies(request).settings
    body = {
        "issuer": settings.console_oidc_issuer,
        "client_id": settings.console_client_id,
        "scopes": settings.console_scopes,
        "operator_scope": settings.operator_scope,
        "schema": settings.document_schema,
    }
    return Response(200, "application/json", body, headers=security_headers(request))


@router.get("/console/<name>", include_in_schema=False)
def console_asset(request: Request, name: str) -> Response[str]:
    return _file(request, name)


def _file(request: Request, name: str) -> Response[str]:
    found = asset(name)
    if found is None:
        raise NotFound("no such file of the console")
    text, media_type = found
    return Response(200, media_type, text, headers=security_headers(request))
