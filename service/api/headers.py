"""Security headers on every answer (issue 40): the dashboard keeps an API token in the tab
(sessionStorage, dashboards/static/triage.js), so no script but the app's own files may run in
its pages, no other site may frame them, and nothing is sniffed into a script.

- Content-Security-Policy: scripts, styles, images and fetches from this origin only; no inline
  script (the pages' scripts are files under /static), no plugins, no <base>, forms post here.
  /docs and /redoc alone allow inline styles: Swagger UI and ReDoc set them, and ReDoc searches
  in a blob: worker. Inline style cannot run code.
- frame-ancestors 'none' (and X-Frame-Options for older browsers): no clickjacking.
- X-Content-Type-Options: nosniff; Referrer-Policy: no job or alert URL leaves in a Referer.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
          "frame-ancestors 'none'")
DOCS_POLICY = POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'") + "; worker-src 'self' blob:"
DOCS = ("/docs", "/redoc")


def _headers(policy: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-security-policy", policy.encode()), (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin")]


HEADERS, DOCS_HEADERS = _headers(POLICY), _headers(DOCS_POLICY)


class SecurityHeaders:
    """Pure ASGI middleware: adds the headers to every HTTP response start."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = DOCS_HEADERS if scope["path"] in DOCS else HEADERS

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)
