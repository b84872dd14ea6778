"""The OpenAPI document is the contract: every answer the server gives is one it lists, in the
listed shape, and the request schemas accept and refuse what the server accepts and refuses."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest

from .conftest import EMPLOYEE, OTHER, post_run

QUESTION = "我的假期餘額還有多少？"
FACADE = "/v1/chat/completions"


@pytest.fixture(scope="module")
def spec(stack) -> dict[str, Any]:
    return httpx.get(f"{stack.loop}/openapi.json").json()


def validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    """A validator for a schema of the document, its `$ref`s resolved inside the document."""
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]})


def body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    return spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def assert_documented(
    spec: dict[str, Any], method: str, template: str, response: httpx.Response
) -> None:
    documented = spec["paths"][template][method]["responses"]
    status = str(response.status_code)
    assert status in documented, f"{method.upper()} {template} answered {status}: {response.text}"
    content = documented[status].get("content")
    if not content:
        return
    media = response.headers["content-type"].split(";")[0]
    assert media in content, f"{method.upper()} {template} {status} answered {media}"
    schema = content[media].get("schema")
    if schema and media == "application/json":
        validator(spec, schema).validate(response.json())


def test_every_answer_is_one_the_document_lists_in_its_shape(stack, spec):
    finished = post_run(stack, {"input": QUESTION}).json()
    run_path = f"/v1/runs/{finished['id']}"
    anonymous: dict[str, str] = {}
    refused = {"Authorization": "Bearer not-a-known-token"}
    huge = {**EMPLOYEE, "X-Padding": "x" * 20_000}
    chat = {"model": "leave-copilot-agent", "messages": [{"role": "user", "content": QUESTION}]}
    probes: list[tuple[str, str, str, dict[str, str], Any]] = [
        ("get", "/healthz", "/healthz", anonymous, None),
        ("get", "/readyz", "/readyz", anonymous, None),
        ("get", "/metrics", "/metrics", anonymous, None),
        ("get", "/v1/models", "/v1/models", anonymous, None),
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, {"input": QUESTION}),
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, {"input": QUESTION, "stream": True}),
        ("post", "/v1/runs", "/v1/runs", anonymous, {"input": QUESTION}),
        ("post", "/v1/runs", "/v1/runs", refused, {"input": QUESTION}),
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, {"input": ""}),
        ("post", "/v1/runs", "/v1/runs", huge, {"input": QUESTION}),
        ("get", "/v1/runs", "/v1/runs", EMPLOYEE, None),
        ("get", "/v1/runs", "/v1/runs?limit=0", EMPLOYEE, None),
        ("post", "/v1/runs", "/v1/runs", OTHER, {"input": QUESTION, "run_id": finished["id"]}),
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, {"input": QUESTION, "run_id": finished["id"]}),
        ("get", "/v1/runs/{run_id}", run_path, EMPLOYEE, None),
        ("get", "/v1/runs/{run_id}", run_path, OTHER, None),
        ("get", "/v1/runs/{run_id}", run_path, anonymous, None),
        ("post", "/v1/runs/{run_id}/cancel", f"{run_path}/cancel", EMPLOYEE, None),
        (
            "post",
            "/v1/runs/{run_id}/confirmations/{confirmation_id}",
            f"{run_path}/confirmations/cf_none",
            EMPLOYEE,
            {"action": "accept"},
        ),
        (
            "post",
            "/v1/runs/{run_id}/confirmations/{confirmation_id}",
            f"{run_path}/confirmations/cf_none",
            EMPLOYEE,
            {"action": "maybe"},
        ),
        ("post", FACADE, FACADE, EMPLOYEE, chat),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "stream": True}),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "model": "gpt-4"}),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "messages": [{"role": ""}]}),
        ("post", FACADE, FACADE, anonymous, chat),
    ]
    seen = set()
    with httpx.Client(base_url=stack.loop, timeout=60) as http:
        for method, template, path, headers, body in probes:
            response = http.request(method, path, headers=headers, json=body)
            assert_documented(spec, method, template, response)
            seen.add((template, response.status_code))
    assert {(FACADE, 400), ("/v1/runs", 409), ("/v1/runs", 422), ("/v1/runs", 431)} <= seen
    assert spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"].keys() == {"text/plain"}


RUN_BODIES = [
    {"input": QUESTION},
    {"input": QUESTION, "stream": False, "confirm": "decline"},
    {"input": QUESTION, "session_id": "contract-1"},
    {"input": QUESTION, "stream": 0},
    {"input": QUESTION, "stream": "false"},
    {"input": QUESTION, "confirm": "always"},
    {"input": QUESTION, "session_id": "../../etc"},
    {"input": ""},
    {"input": 42},
    {},
]
CHAT_BODIES = [
    [{"role": "user", "content": QUESTION}],
    [{"role": "system", "content": "你好"}, {"role": "user", "content": QUESTION}],
    [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    [{"role": ""}],
    [{"role": "wizard", "content": QUESTION}],
    [{"content": QUESTION}],
    [{"role": "user", "content": [{"type": "text", "text": 123}]}],
    [{"role": "user", "content": [{"text": QUESTION}]}],
    [{"role": "user", "content": 7}],
    [],
]


@pytest.mark.parametrize("body", RUN_BODIES)
def test_the_run_request_schema_accepts_exactly_what_the_server_accepts(stack, spec, body):
    valid = validator(spec, body_schema(spec, "/v1/runs")).is_valid(body)
    response = post_run(stack, body)
    assert response.status_code == (200 if valid else 422), (valid, response.text)


@pytest.mark.parametrize("messages", CHAT_BODIES)
@pytest.mark.parametrize("stream", [False, 0])
def test_the_chat_request_schema_accepts_exactly_what_the_server_accepts(
    stack, spec, messages, stream
):
    body = {"model": "leave-copilot-agent", "messages": messages, "stream": stream}
    valid = validator(spec, body_schema(spec, FACADE)).is_valid(body)
    response = httpx.post(f"{stack.loop}{FACADE}", json=body, headers=EMPLOYEE, timeout=60)
    assert response.status_code == (200 if valid else 400), (valid, response.text)
