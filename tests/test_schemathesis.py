"""A bounded property-based run of the live OpenAPI schema (schemathesis): every operation gets
generated requests, valid and invalid, with an admin token, on the real PostgreSQL (inside the
test's rolled-back transaction). No response may be a server error or differ from the schema:
status codes, content types and bodies (a 422 is either FastAPI's list of issues or a message);
an invalid request must be refused.

Only git's network transports are cut (GIT_ALLOW_PROTOCOL=file): a generated https URL fails at
once instead of reaching out. Bounded by EXAMPLES per operation and mode (about 30 s on 2 cores).
The cases are driven with hypothesis directly: schemathesis' pytest fixture loader relies on a
pytest private attribute that pytest 9 no longer has."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.gitrepo import make_repo

EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]


@pytest.fixture
def admin_headers(make_client, tmp_path, monkeypatch) -> dict[str, str]:
    """An admin token, and a registered repository for the generated requests to find."""
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "file")
    admin = make_client("admin")
    make_repo(tmp_path / "lib", ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)"])
    assert admin.post("/api/repositories", json={"name": "lib", "url": str(tmp_path / "lib")}).status_code == 201
    return {"Authorization": admin.headers["authorization"]}


def run_operation(operation, mode: GenerationMode, headers: dict[str, str]) -> bool:
    """Run the examples of one operation; False when it has no invalid input to make (an
    operation without parameters or body, in negative mode)."""
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        check()
    except Unsatisfiable:
        if mode is GenerationMode.NEGATIVE:
            return False
        raise
    return True


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_every_operation_answers_within_its_schema(app, admin_headers, mode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    ran = [run_operation(operation, mode, admin_headers) for operation in operations]
    assert sum(ran) >= 10
