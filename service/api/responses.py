"""The JSON response class of every route: pydantic-core's serializer (Rust) instead of the
standard library's json.dumps, about 3x faster on a long history (3.5 MB: 16 ms against 50 ms).
Non-finite floats are written as null (JSON has no NaN)."""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core
from fastapi import Request
from fastapi.responses import JSONResponse, Response


class FastJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return pydantic_core.to_json(content)


def etagged(request: Request, content: Any) -> Response:
    """`content` as JSON with a strong ETag (a hash of the body); 304 without a body when the
    request's If-None-Match names it, so a dashboard refresh of an unchanged history moves no
    payload (issue 29). The server still builds the body: the saving is the transfer and the
    client's parsing."""
    body = pydantic_core.to_json(content)
    tag = '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
    headers = {"ETag": tag, "Cache-Control": "no-cache"}  # revalidate every time, never stale
    wanted = [t.strip() for t in request.headers.get("if-none-match", "").split(",")]
    if tag in wanted or "*" in wanted:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)
