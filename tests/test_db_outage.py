"""With the database unreachable the API answers 503 with Retry-After and no driver text."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from perfbisect.service.api import create_app
from perfbisect.service.api.deps import get_session

DRIVER_TEXT = 'connection to server at "db.internal" (10.0.0.5), port 5432 failed: password authentication'


def test_a_database_outage_is_a_503_without_internals() -> None:
    app = create_app()

    def unreachable():
        raise OperationalError("SELECT 1", {}, Exception(DRIVER_TEXT))
        yield  # pragma: no cover

    app.dependency_overrides[get_session] = unreachable
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/api/jobs/1")
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["detail"] == "database unavailable, retry later"
    assert "db.internal" not in response.text
