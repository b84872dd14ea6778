"""The loop's HTTP API at its edges, over a socket: answers to confirmations it cannot take,
bodies too large or not JSON, methods it does not serve, what the facade does not support, the
shapes of the errors that say so, and the form of its times."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import mcp_server, model_simulator

from .conftest import EMPLOYEE, Stack, leave_status, loop_service, post_run

QUESTION = "我的假期餘額還有多少？"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, new_database_url) -> Iterator[Stack]:
    """The stack with a confirmation timeout long enough to answer one several times, and the
    loop's default body limit."""
    workdir = tmp_path_factory.mktemp("apistack")
    mcp_db_url = new_database_url(workdir, "leave")
    with (
        mcp_server(workdir, mcp_db_url) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            confirmation_timeout_seconds="60",
        ) as (loop, store_url),
    ):
        yield Stack(loop, f"{mcp}/mcp", f"{sim}/v1", store_url, mcp_db_url, workdir)


# --- confirmations ---------------------------------------------------------------------------

NESTED = {"action": "accept", "content": {"a": {"b": 1}}}


@pytest.mark.parametrize(
    "body",
    [NESTED, {"action": "accept", "content": {"confirm": "maybe"}}, {"action": "accept"}],
)
def test_an_answer_to_an_unknown_run_or_confirmation_is_404_whatever_its_content(stack, body):
    finished = post_run(stack, {"input": QUESTION}).json()
    for path in (
        "/v1/runs/run_does_not_exist/confirmations/cf_none",
        f"/v1/runs/{finished['id']}/confirmations/cf_none",
    ):
        response = httpx.post(f"{stack.loop}{path}", json=body, headers=EMPLOYEE)
        assert response.status_code == 404, response.text
        assert response.json() == {"detail": "no such pending confirmation"}


def test_content_a_pending_confirmation_cannot_take_is_422_and_it_stays_answerable(stack):
    found = post_run(stack, {"input": "查一下我表妹婚禮的假單"}).json()
    leave_id = found["steps"][1]["result"]["leaves"][0]["leave_id"]
    refused: list[httpx.Response] = []
    accepted: httpx.Response | None = None
    final: dict[str, Any] = {}
    with (
        httpx.Client(base_url=stack.loop, headers=EMPLOYEE, timeout=60) as http,
        http.stream(
            "POST", "/v1/runs", json={"input": "取消我表妹婚禮那張假", "stream": True}
        ) as response,
    ):
        run_id, kind = "", ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                run_id = run_id or data["id"]
                if kind == "confirmation.requested":
                    path = f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}"
                    for content in ({"a": {"b": 1}}, {"confirm": "yes"}, {"confirm": [True]}):
                        refused.append(
                            http.post(path, json={"action": "accept", "content": content})
                        )
                    accepted = http.post(
                        path, json={"action": "accept", "content": {"confirm": True}}
                    )
                if kind == "run.finished":
                    final = data
    for answer in refused:
        assert answer.status_code == 422, answer.text
        errors = answer.json()["detail"]
        assert errors and all(e["loc"][:2] == ["body", "content"] for e in errors), errors
    assert accepted is not None and accepted.status_code == 200, accepted
    assert accepted.json() == {"status": "answered", "action": "accept"}
    assert final["answer"].startswith("已取消假單"), final
    assert leave_status(stack, leave_id) == "cancelled"


def test_the_confirmation_schema_describes_the_content_an_elicitation_can_carry(stack):
    spec = httpx.get(f"{stack.loop}/openapi.json").json()
    content = spec["components"]["schemas"]["ConfirmationAnswer"]["properties"]["content"]
    as_object = next(s for s in content["anyOf"] if s.get("type") == "object")
    values = as_object["additionalProperties"]["anyOf"]
    kinds = {v.get("type") for v in values}
    assert kinds == {"string", "integer", "number", "boolean", "array", "null"}, values
    assert next(v for v in values if v.get("type") == "array")["items"] == {"type": "string"}


# --- timestamps -------------------------------------------------------------------------------


def test_run_times_are_rfc3339_with_an_offset_like_step_times(stack):
    final = post_run(stack, {"input": QUESTION}).json()
    record = httpx.get(f"{stack.loop}/v1/runs/{final['id']}", headers=EMPLOYEE).json()
    listed = httpx.get(f"{stack.loop}/v1/runs", headers=EMPLOYEE).json()["runs"]
    mine = next(r for r in listed if r["id"] == final["id"])
    stamps = [
        record["created_at"],
        record["finished_at"],
        mine["created_at"],
        mine["finished_at"],
        *(s["started_at"] for s in record["steps"]),
    ]
    for stamp in stamps:
        assert stamp.endswith("+00:00"), stamps
        assert dt.datetime.fromisoformat(stamp).utcoffset() == dt.timedelta(0)
    created = dt.datetime.fromisoformat(record["created_at"])
    assert created <= dt.datetime.fromisoformat(record["steps"][0]["started_at"])
