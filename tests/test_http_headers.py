"""HTTP hardening (issue 40): every answer (pages, API, errors, docs, static files) carries a
strict Content-Security-Policy, frame-ancestors 'none', nosniff and a Referrer-Policy, and no
page has an inline script or style for that policy to block. tests/test_browser.py checks in
Chromium that the policy blocks nothing the pages need."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parent.parent / "dashboards" / "templates"
PATHS = ("/dashboard", "/dashboard/jobs", "/dashboard/alerts", "/dashboard/jobs/999999", "/api/jobs",
         "/openapi.json", "/static/triage.js", "/healthz", "/nowhere", "/docs", "/redoc")


def _directives(policy: str) -> dict[str, list[str]]:
    return {name: values for name, *values in (part.split() for part in policy.split(";") if part.strip())}


@pytest.mark.parametrize("path", PATHS)
def test_every_answer_carries_the_security_headers(anonymous_client, path) -> None:
    answer = anonymous_client.get(path, headers={"Accept": "text/html"})
    policy = _directives(answer.headers["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"]  # no inline script, no eval, no other origin
    assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
    assert policy["default-src"] == ["'self'"] and policy["base-uri"] == ["'none'"]
    inline_style = "'unsafe-inline'" in policy["style-src"]
    assert inline_style == (path in ("/docs", "/redoc"))  # Swagger UI and ReDoc set inline styles
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Referrer-Policy"] == "same-origin"


def test_a_refused_answer_carries_them_too(anonymous_client) -> None:
    refused = anonymous_client.get("/api/jobs", headers={"Authorization": "Bearer pbt_wrong"})
    assert refused.status_code == 401 and "frame-ancestors 'none'" in refused.headers["Content-Security-Policy"]


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.html")))
def test_no_template_has_an_inline_script_handler_or_style(template) -> None:
    text = (TEMPLATES / template).read_text()
    scripts = re.findall(r"<script\b([^>]*)>", text)
    assert all("src=" in attrs or 'type="application/json"' in attrs for attrs in scripts), scripts
    assert not re.search(r"\son[a-z]+\s*=", text), "an inline event handler"
    assert not re.search(r"\sstyle\s*=", text) and "<style" not in text, "an inline style"
    assert "javascript:" not in text


# What a browser would fetch from another host: an element's src, a stylesheet's url(), a script's
# src property (ReDoc's sidebar logo was `src:"https://cdn.redoc.ly/..."`), or any CDN at all.
# Case-sensitive: ReDoc's `new URL("https://" + host)` parses a URL, it fetches nothing.
EXTERNAL_FETCH = re.compile(r"""(src\s*[:=]\s*["']?\s*(https?:)?//|url\(\s*["']?(https?:)?//|cdn\.)""")


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_api_docs_fetch_nothing_from_another_host(anonymous_client, path) -> None:
    page = anonymous_client.get(path, headers={"Accept": "text/html"})
    assert page.status_code == 200
    assets = re.findall(r"""<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)\"""", page.text)
    assert assets and all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    for text in [page.text] + [anonymous_client.get(a).text for a in assets]:
        assert not EXTERNAL_FETCH.search(text), EXTERNAL_FETCH.search(text).group(0)
