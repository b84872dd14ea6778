"""The OpenAPI document is the contract: every answer the server gives is one it lists, in the
listed shape, and the request schemas accept and refuse what the server accepts and refuses."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest

from .helpers import EMPLOYEE, OTHER, post_run

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
    too_large = {"input": "x" * 2_000_000}
    not_utf8 = b'{"input": "\xff"}'
    confirmation = "/v1/runs/{run_id}/confirmations/{confirmation_id}"
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
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, too_large),
        ("post", "/v1/runs", "/v1/runs", EMPLOYEE, not_utf8),
        ("get", "/v1/models", "/v1/models", huge, None),
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
        (
            "post",
            confirmation,
            f"{run_path}/confirmations/cf_none",
            EMPLOYEE,
            {"action": "accept", "content": {"a": {"b": 1}}},
        ),
        ("post", confirmation, f"{run_path}/confirmations/cf_none", EMPLOYEE, not_utf8),
        ("post", FACADE, FACADE, EMPLOYEE, chat),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "stream": True}),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "model": "gpt-4"}),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "messages": [{"role": ""}]}),
        ("post", FACADE, FACADE, anonymous, chat),
        ("post", FACADE, FACADE, refused, chat),
        ("post", FACADE, FACADE, huge, chat),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "n": 2}),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "tools": []}),
        ("post", FACADE, FACADE, EMPLOYEE, not_utf8),
        ("post", FACADE, FACADE, EMPLOYEE, {**chat, "messages": [{"content": "x" * 2_000_000}]}),
    ]
    seen = set()
    with httpx.Client(base_url=stack.loop, timeout=60) as http:
        for method, template, path, headers, body in probes:
            if isinstance(body, bytes):
                sent = {"content": body, "headers": {**headers, "Content-Type": "application/json"}}
            else:
                sent = {"json": body, "headers": headers}
            response = http.request(method, path, **sent)
            assert_documented(spec, method, template, response)
            seen.add((template, response.status_code))
    assert {
        (FACADE, 400),
        (FACADE, 401),
        (FACADE, 413),
        (FACADE, 431),
        ("/v1/models", 431),
        ("/v1/runs", 409),
        ("/v1/runs", 413),
        ("/v1/runs", 422),
        ("/v1/runs", 431),
        (confirmation, 404),
        (confirmation, 422),
    } <= seen
    assert spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"].keys() == {"text/plain"}


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]


def test_the_bearer_token_is_a_security_scheme_not_a_header_parameter(spec):
    [(name, scheme)] = spec["components"]["securitySchemes"].items()
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer"), scheme
    public = {"/healthz", "/readyz", "/metrics", "/v1/models"}
    for method, path, op in operations(spec):
        headers = [p for p in op.get("parameters", []) if p["in"] == "header"]
        # OpenAPI tools must ignore a header parameter named Authorization: the scheme says it
        assert not headers, (method, path, headers)
        if path in public:
            assert "security" not in op, (method, path)
        else:
            assert op["security"] == [{name: []}], (method, path)
            assert "401" in op["responses"], (method, path)


@pytest.mark.parametrize(
    "authorization", [None, "Basic ZGVtbzpkZW1v", "Bearer", "Bearer not-a-known-token"]
)
def test_the_server_holds_every_operation_to_its_security(stack, spec, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    with httpx.Client(base_url=stack.loop, timeout=60) as http:
        for method, path, op in operations(spec):
            concrete = path.replace("{run_id}", "run_x").replace("{confirmation_id}", "cf_x")
            body = {"input": QUESTION, "action": "accept"} if method == "post" else None
            response = http.request(method, concrete, headers=headers, json=body)
            if "security" in op:
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                assert_documented(spec, method, path, response)
            else:
                assert response.status_code != 401, (method, path)


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


CHAT_PARAMETERS = [
    {},
    {"n": 1},
    {"user": "someone"},
    {"stream_options": {"include_usage": True}, "stream": True},
    {"n": 2},
    {"n": None},
    {"tools": []},
    {"tool_choice": "auto"},
    {"temperature": 0},
    {"response_format": {"type": "text"}},
    {"frobnicate": 1},
    # what chat front ends send (issue 33): taken, or refused, exactly as the schema says
    {"temperature": 0.2, "top_p": 1, "max_tokens": 256, "seed": 1, "presence_penalty": 0},
    {"temperature": None, "stop": None, "frequency_penalty": None, "logit_bias": None},
    {"temperature": "0.2"},
    {"temperature": 2.5},
    {"max_tokens": 0},
    {"seed": 1.5},
    {"stop": "。"},
    {"stop": ["a", "b", "c", "d", "e"]},
    {"n": True},
    {"logprobs": False},
    {"logprobs": True},
    {"top_logprobs": 2},
    {"response_format": {"type": "json_object"}},
    {"tools": [{"type": "function", "function": {"name": "search_chats"}}]},
    {"tool_choice": {"type": "function", "function": {"name": "search_chats"}}},
    {"parallel_tool_calls": "yes"},
    {"reasoning_effort": "low", "metadata": {"chat": "x"}},
]


@pytest.mark.parametrize("parameters", CHAT_PARAMETERS)
def test_the_chat_schema_takes_exactly_the_parameters_the_server_takes(stack, spec, parameters):
    body = {
        "model": "leave-copilot-agent",
        "messages": [{"role": "user", "content": QUESTION}],
        **parameters,
    }
    valid = validator(spec, body_schema(spec, FACADE)).is_valid(body)
    response = httpx.post(f"{stack.loop}{FACADE}", json=body, headers=EMPLOYEE, timeout=60)
    assert response.status_code == (200 if valid else 400), (valid, response.text)


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


def test_the_document_lists_every_step_kind_and_outcome(spec):
    from common.contract import StepKind, StepOutcome

    schemas = spec["components"]["schemas"]
    step = schemas["Step"]["properties"]
    assert step["type"]["$ref"].endswith("/StepKind")
    assert any(o.get("$ref", "").endswith("/StepOutcome") for o in step["error"]["anyOf"])
    assert schemas["StepKind"]["enum"] == [k.value for k in StepKind]
    assert schemas["StepOutcome"]["enum"] == [o.value for o in StepOutcome]


def test_the_stream_s_events_are_listed_with_their_shapes(stack, spec):
    """POST /v1/runs with stream: every event of a run (a confirmation's included) is one the
    document names, and its data has the listed shape."""
    from common import sse
    from common.runs_protocol import EVENTS

    answer = spec["paths"]["/v1/runs"]["post"]["responses"]["200"]["content"]
    by_name = answer["text/event-stream"]["schema"]["discriminator"]["mapping"]
    assert set(by_name) == set(EVENTS)
    seen: list[str] = []
    run_id = ""
    body = {"input": "取消我表妹婚禮那張假", "stream": True}
    with (
        httpx.Client(base_url=stack.loop, headers=EMPLOYEE, timeout=60) as http,
        http.stream("POST", "/v1/runs", json=body) as response,
    ):
        for event in sse.events(response.iter_lines()):
            seen.append(event.event)
            data = event.json()
            validator(spec, {"$ref": by_name[event.event]}).validate({"event": event.event, **data})
            if event.event == "run.started":
                run_id = data["id"]
            if event.event == "confirmation.requested":
                path = f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}"
                http.post(path, json={"action": "decline"}).raise_for_status()
    assert {"run.started", "tool.finished", "confirmation.requested", "run.finished"} <= set(seen)
