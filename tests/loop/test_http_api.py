"""The loop's HTTP API at its edges, over a socket: answers to confirmations it cannot take,
bodies too large or not JSON, methods it does not serve, what the facade does not support, the
shapes of the errors that say so, and the form of its times."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from common.runs_protocol import RunFinished, WaitingConfirmation
from loop.app import create_app
from loop.runs import RunNotRecorded
from loop.settings import LoopSettings
from loop.store import RunStore
from tests.support import free_port, loop_service, mcp_server, model_simulator, serving_in_thread

from .helpers import EMPLOYEE, OTHER, Stack, leave_status, post_run, stream_run

FACADE = "/v1/chat/completions"
QUESTION = "我的假期餘額還有多少？"
CHAT = {"model": "leave-copilot-agent", "messages": [{"role": "user", "content": QUESTION}]}
DEFAULT_BODY_LIMIT = 1024 * 1024
ERROR_EXCERPT_BOUND = 2_000  # bytes: an error body never carries more of the request than this


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


def openai_error_body(response: httpx.Response) -> dict[str, Any]:
    """The `error` object of an answer in the OpenAI error shape (and nothing else)."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == response.status_code and isinstance(error["message"], str)
    return dict(error)


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


def answering_confirmations(
    stack: Stack, request: str, answer: Callable[[httpx.Client, str], None], headers=EMPLOYEE
) -> RunFinished:
    """Stream the run of `request` (stream_run); at each confirmation call `answer(client, its
    path)`, which answers it over HTTP itself: these tests are of that endpoint's edges. The
    finished run."""

    def over_http(run_id: str, question: WaitingConfirmation) -> None:
        with httpx.Client(base_url=stack.loop, headers=headers, timeout=60) as http:
            answer(http, f"/v1/runs/{run_id}/confirmations/{question.confirmation_id}")

    _, final = stream_run(stack.loop, {"input": request}, headers, over_http)
    return final


def test_content_a_pending_confirmation_cannot_take_is_422_and_it_stays_answerable(stack):
    found = post_run(stack, {"input": "查一下我表妹婚禮的假單"}).json()
    leave_id = found["steps"][1]["result"]["leaves"][0]["leave_id"]
    refused: list[httpx.Response] = []
    accepted: list[httpx.Response] = []

    def answer(http: httpx.Client, path: str) -> None:
        for content in ({"a": {"b": 1}}, {"confirm": "yes"}, {"confirm": [True]}):
            refused.append(http.post(path, json={"action": "accept", "content": content}))
        accepted.append(http.post(path, json={"action": "accept", "content": {"confirm": True}}))

    final = answering_confirmations(stack, "取消我表妹婚禮那張假", answer)
    for response in refused:
        assert response.status_code == 422, response.text
        errors = response.json()["detail"]
        assert errors and all(e["loc"][:2] == ["body", "content"] for e in errors), errors
    assert [a.status_code for a in accepted] == [200], accepted
    assert accepted[0].json() == {"status": "answered", "action": "accept"}
    assert final.answer.startswith("已取消假單"), final
    assert leave_status(stack, leave_id) == "cancelled"


def test_the_confirmation_schema_describes_the_content_an_elicitation_can_carry(stack):
    spec = httpx.get(f"{stack.loop}/openapi.json").json()
    content = spec["components"]["schemas"]["ConfirmationAnswer"]["properties"]["content"]
    as_object = next(s for s in content["anyOf"] if s.get("type") == "object")
    values = as_object["additionalProperties"]["anyOf"]
    kinds = {v.get("type") for v in values}
    assert kinds == {"string", "integer", "number", "boolean", "array", "null"}, values
    assert next(v for v in values if v.get("type") == "array")["items"] == {"type": "string"}


# --- body limits and bounded errors ----------------------------------------------------------


def assert_too_large(response: httpx.Response, limit: int = DEFAULT_BODY_LIMIT) -> None:
    assert response.status_code == 413, response.text[:300]
    assert len(response.content) < 300
    assert f"{limit} bytes" in response.text


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x" * 30_000_000},
        {"input": "x" * 5_000_000},
        {"input": QUESTION, "session_id": "s" * 5_000_000},
    ],
    ids=["30MB-input", "5MB-input", "5MB-session_id"],
)
def test_a_body_over_the_limit_is_413_before_it_is_parsed(stack, body):
    response = httpx.post(f"{stack.loop}/v1/runs", json=body, headers=EMPLOYEE, timeout=60)
    assert_too_large(response)
    assert response.json() == {
        "detail": f"request body too large (limit {DEFAULT_BODY_LIMIT} bytes)"
    }


def test_a_chunked_body_without_content_length_is_counted_and_refused(stack):
    chunk = b'{"input": "' + b"x" * 64 * 1024

    def body() -> Iterator[bytes]:
        yield chunk
        for _ in range(40):  # 2.6 MB in all, never announced
            yield b"x" * 64 * 1024
        yield b'"}'

    response = httpx.post(
        f"{stack.loop}/v1/runs",
        content=body(),
        headers={**EMPLOYEE, "Content-Type": "application/json"},
        timeout=60,
    )
    assert "content-length" not in response.request.headers
    assert_too_large(response)


@pytest.mark.parametrize("path", ["/v1/runs/run_x/confirmations/cf_x", "/v1/runs/run_x/cancel"])
def test_every_route_has_the_body_limit(stack, path):
    big = json.dumps({"action": "accept", "pad": "x" * 2_000_000})
    response = httpx.post(
        f"{stack.loop}{path}",
        content=big,
        headers={**EMPLOYEE, "Content-Type": "application/json"},
    )
    assert_too_large(response)
    listed = httpx.request("GET", f"{stack.loop}/v1/runs", content=big, headers=EMPLOYEE)
    assert_too_large(listed)


def test_the_facade_refuses_a_body_over_the_limit_in_the_openai_shape(stack):
    body = {**CHAT, "messages": [{"role": "user", "content": "x" * 2_000_000}]}
    response = httpx.post(f"{stack.loop}{FACADE}", json=body, headers=EMPLOYEE)
    assert_too_large(response)
    assert openai_error_body(response)["type"] == "RequestTooLargeError"


def test_a_body_just_under_the_limit_is_read(stack):
    padding = DEFAULT_BODY_LIMIT - len(json.dumps({"input": QUESTION, "stream": ""}).encode())
    body = json.dumps({"input": QUESTION, "stream": "x" * padding}).encode()
    assert len(body) == DEFAULT_BODY_LIMIT
    response = httpx.post(
        f"{stack.loop}/v1/runs",
        content=body,
        headers={**EMPLOYEE, "Content-Type": "application/json"},
    )
    assert response.status_code == 422  # read and validated: `stream` must be a boolean
    assert response.json()["detail"][0]["loc"] == ["body", "stream"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"input": "長" * 300_000}, ["body", "input"]),
        ({"input": QUESTION, "session_id": "s" * 900_000}, ["body", "session_id"]),
        ({"input": ["x" * 1000] * 800}, ["body", "input"]),
    ],
    ids=["input", "session_id", "a-list-as-input"],
)
def test_a_422_echoes_only_an_excerpt_of_what_it_refuses(stack, body, loc):
    response = httpx.post(f"{stack.loop}/v1/runs", json=body, headers=EMPLOYEE)
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < ERROR_EXCERPT_BOUND, len(response.content)
    error = response.json()["detail"][0]
    assert error["loc"] == loc
    sent = json.dumps(body[loc[1]], ensure_ascii=False)
    assert isinstance(error["input"], str) and error["input"][:20] in sent


def test_a_422_bounds_a_refused_key_and_the_facade_400s_and_404s_echo_an_excerpt(stack):
    huge_key = "k" * 500_000
    confirm = {"action": "accept", "content": {huge_key: {"b": 1}}}
    finished = post_run(stack, {"input": QUESTION}).json()
    answers = [
        httpx.post(
            f"{stack.loop}/v1/runs/{finished['id']}/confirmations/cf_none",
            json=confirm,
            headers=EMPLOYEE,
        ),
        httpx.post(
            f"{stack.loop}{FACADE}", json={**CHAT, "model": "m" * 900_000}, headers=EMPLOYEE
        ),
        httpx.post(f"{stack.loop}{FACADE}", json={**CHAT, huge_key: 1}, headers=EMPLOYEE),
        httpx.post(
            f"{stack.loop}{FACADE}",
            json={**CHAT, "messages": [{"role": "x" * 900_000, "content": QUESTION}]},
            headers=EMPLOYEE,
        ),
    ]
    assert [a.status_code for a in answers] == [404, 404, 400, 400]
    for answer in answers:
        assert len(answer.content) < ERROR_EXCERPT_BOUND, (answer.status_code, answer.text[:300])


def test_the_body_limit_is_the_setting(tmp_path):
    settings = LoopSettings(
        max_body_bytes=4096,
        store_url=f"sqlite:///{tmp_path / 'loop.db'}",
        mcp_url=f"http://127.0.0.1:{free_port()}/mcp",
    )
    with serving_in_thread(create_app(settings), "the loop") as base:
        over = httpx.post(f"{base}/v1/runs", json={"input": "x" * 5000})
        under = httpx.post(f"{base}/v1/runs", json={"input": "x" * 3000})
    assert_too_large(over, 4096)
    assert under.status_code == 401  # read, then refused for its missing token


# --- malformed bodies, methods ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"input": "\xff\xfe"}', "not valid UTF-8"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    ],
    ids=["not-utf8", "nested-200000-deep"],
)
def test_a_body_json_cannot_read_is_the_documented_422_or_the_facades_400(stack, body, says):
    finished = post_run(stack, {"input": QUESTION}).json()
    headers = {**EMPLOYEE, "Content-Type": "application/json"}
    for path in ("/v1/runs", f"/v1/runs/{finished['id']}/confirmations/cf_none"):
        response = httpx.post(f"{stack.loop}{path}", content=body, headers=headers)
        assert response.status_code == 422, (path, response.text)
        [error] = response.json()["detail"]
        assert error["type"] == "json_invalid" and error["loc"][0] == "body", error
        assert says in error["ctx"]["error"], error
    response = httpx.post(f"{stack.loop}{FACADE}", content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = openai_error_body(response)
    assert error["type"] == "BadRequestError" and says in error["message"], error


# A lone surrogate escape is valid JSON, but decodes to a string that is not Unicode text: it
# must be refused where the body is read, not fail the run, the store or the error body.
LONE = '"\\ud800"'


def lone(template: str) -> str:
    """The JSON `template` with the lone surrogate's escape at @."""
    return template.replace("@", LONE)


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/v1/runs", lone('{"input":@}'), "input"),
        ("/v1/runs", lone('{"input":"hi","session_id":@}'), "session_id"),
        ("/v1/runs", lone('{"input":"hi","run_id":@}'), "run_id"),
        ("/v1/runs", lone('{"input":"hi","confirm":@}'), "confirm"),
        ("/v1/runs", lone('{"input":"hi",@:1}'), "body"),
        (FACADE, lone('{"model":@,"messages":[{"role":"user","content":"hi"}]}'), "model"),
        (
            FACADE,
            lone('{"model":"leave-copilot-agent","messages":[{"role":"user","content":@}]}'),
            "messages[0].content",
        ),
        (
            FACADE,
            '{"model":"leave-copilot-agent","messages":[{"role":"user","content":'
            '[{"type":"text","text":"\\udfff"}]}]}',
            "messages[0].content[0].text",
        ),
    ],
)
def test_a_lone_surrogate_is_a_4xx_in_the_routes_shape_and_starts_no_run(stack, path, raw, field):
    before = httpx.get(f"{stack.loop}/v1/runs?limit=100", headers=EMPLOYEE).json()["runs"]
    with httpx.Client(base_url=stack.loop, headers=EMPLOYEE, timeout=60) as http:
        response = http.post(path, content=raw, headers={"content-type": "application/json"})
        # the connection stays usable: the error was answered, not a crash
        assert http.get("/healthz").status_code == 200
    if path == FACADE:
        assert response.status_code == 400, response.text
        assert f"{field}: " in openai_error_body(response)["message"]
    else:
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["type"] == "json_invalid" and error["ctx"]["error"].startswith(f"{field}: ")
    assert "surrogate" in response.text
    after = httpx.get(f"{stack.loop}/v1/runs?limit=100", headers=EMPLOYEE).json()["runs"]
    assert after == before


def test_a_valid_surrogate_pair_is_text_and_runs(stack):
    raw = '{"input":"查一下我的假單 \\ud83d\\ude00"}'
    response = httpx.post(
        f"{stack.loop}/v1/runs",
        content=raw,
        headers={**EMPLOYEE, "content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["input"].endswith("😀")


def test_a_confirmations_content_with_a_lone_surrogate_is_422_and_it_stays_answerable(stack):
    answers: list[httpx.Response] = []

    def answer(http: httpx.Client, path: str) -> None:
        raw = lone('{"action":"accept","content":{"note":@}}')
        answers.append(http.post(path, content=raw, headers={"content-type": "application/json"}))
        answers.append(http.post(path, json={"action": "decline"}))

    # another employee's approved leave: the module's other tests cancel this one's
    answering_confirmations(stack, "取消弟弟的畢業典禮那張假", answer, headers=OTHER)
    refused, declined = answers
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["ctx"]["error"].startswith("content.note: ")
    assert declined.status_code == 200, declined.text


class StoreThatCannotWriteRuns(RunStore):
    def begin_run(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    def finish_run(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")


def test_a_run_the_store_could_not_record_is_a_503_never_an_id_get_cannot_find(stack, tmp_path):
    settings = LoopSettings(
        store_url=f"sqlite:///{tmp_path / 'loop.db'}", mcp_url=stack.mcp, model_base_url=stack.model
    )
    app = create_app(settings, store=StoreThatCannotWriteRuns(settings.store_url))
    with serving_in_thread(app, "the loop") as base:
        own = httpx.post(f"{base}/v1/runs", json={"input": QUESTION}, headers=EMPLOYEE, timeout=60)
        facade = httpx.post(f"{base}{FACADE}", json=CHAT, headers=EMPLOYEE, timeout=60)
        listed = httpx.get(f"{base}/v1/runs", headers=EMPLOYEE).json()["runs"]
    assert own.status_code == 503, own.text
    assert own.json() == {"detail": RunNotRecorded.message}
    assert facade.status_code == 503, facade.text
    assert openai_error_body(facade)["message"] == RunNotRecorded.message
    assert "run" not in facade.json()
    assert listed == []


def test_options_and_405_name_every_method_the_path_serves(stack):
    options = httpx.options(f"{stack.loop}/v1/runs", headers=EMPLOYEE)
    assert options.status_code == 204, options.text
    assert allowed(options) == {"GET", "POST", "OPTIONS"}
    deleted = httpx.delete(f"{stack.loop}/v1/runs", headers=EMPLOYEE)
    assert deleted.status_code == 405
    assert allowed(deleted) == {"GET", "POST", "OPTIONS"}
    assert deleted.json() == {"detail": "Method Not Allowed"}
    one_run = httpx.put(f"{stack.loop}/v1/runs/run_x", headers=EMPLOYEE)
    assert one_run.status_code == 405 and allowed(one_run) == {"GET", "OPTIONS"}
    facade = httpx.get(f"{stack.loop}{FACADE}", headers=EMPLOYEE)
    assert facade.status_code == 405 and allowed(facade) == {"POST", "OPTIONS"}
    assert openai_error_body(facade)["type"] == "MethodNotAllowedError"
    assert httpx.options(f"{stack.loop}/no/such/path").status_code == 404


def allowed(response: httpx.Response) -> set[str]:
    return {m.strip() for m in response.headers["allow"].split(",")}


# --- error shapes: the facade's, and a 500's -------------------------------------------------


def test_the_facades_auth_errors_are_in_the_openai_shape_the_client_reads(stack):
    refused = openai.OpenAI(base_url=f"{stack.loop}/v1", api_key="not-a-known-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as error:
        refused.chat.completions.create(**CHAT)
    assert error.value.body["message"] == "the leave system does not accept this token"
    assert "the leave system does not accept this token" in str(error.value)
    missing = httpx.post(f"{stack.loop}{FACADE}", json=CHAT)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert openai_error_body(missing) == {
        "message": "missing bearer token",
        "type": "AuthenticationError",
        "param": None,
        "code": 401,
    }


NON_ASCII_TOKEN = {"Authorization": "Bearer tökén".encode()}


def test_the_facades_429_and_503_are_in_the_openai_shape(tmp_path):
    settings = LoopSettings(
        auth_failure_limit=1,
        store_url=f"sqlite:///{tmp_path / 'loop.db'}",
        mcp_url=f"http://127.0.0.1:{free_port()}/mcp",  # nothing listens
        mcp_connect_timeout_seconds=2,
    )
    with serving_in_thread(create_app(settings), "the loop") as base:
        unavailable = httpx.post(
            f"{base}{FACADE}", json=CHAT, headers={"Authorization": "Bearer well-formed"}
        )
        malformed = httpx.post(f"{base}{FACADE}", json=CHAT, headers=NON_ASCII_TOKEN)
        limited = httpx.post(f"{base}{FACADE}", json=CHAT, headers=NON_ASCII_TOKEN)
    assert unavailable.status_code == 503
    assert openai_error_body(unavailable)["message"] == "the leave MCP server is unavailable"
    assert malformed.status_code == 401 and openai_error_body(malformed)["type"] == (
        "AuthenticationError"
    )
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    assert openai_error_body(limited)["type"] == "RateLimitError"


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"n": 2}, "n", "one choice"),
        ({"top_logprobs": 2}, "top_logprobs", "not supported"),
        ({"response_format": {"type": "json_object"}}, "response_format", "not supported"),
        ({"logprobs": True}, "logprobs", "not supported"),
        ({"temperature": 3}, "temperature", "from 0 to 2"),
        ({"frobnicate": 1}, "frobnicate", "not supported"),
    ],
)
def test_what_the_facade_does_not_support_is_a_400_that_says_so(stack, extra, param, says):
    client = openai.OpenAI(
        base_url=f"{stack.loop}/v1", api_key="demo-token-employee", max_retries=0
    )
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(**CHAT, extra_body=extra)
    assert error.value.body["param"] == param, error.value.body
    assert error.value.body["message"].startswith(f"{param}: ")
    assert says in error.value.body["message"], error.value.body


def test_the_facade_takes_n_1_and_a_user(stack):
    client = openai.OpenAI(
        base_url=f"{stack.loop}/v1", api_key="demo-token-employee", max_retries=0
    )
    response = client.chat.completions.create(**CHAT, n=1, user="someone")
    assert len(response.choices) == 1 and "特休" in response.choices[0].message.content


def test_an_internal_error_is_a_500_in_the_routes_shape_without_internals(tmp_path):
    app = create_app(LoopSettings(store_url=f"sqlite:///{tmp_path / 'loop.db'}"))

    async def broken() -> None:
        raise RuntimeError("internal detail")

    # routes that fail, beside the facade's and the runs' (the shape goes by the path)
    app.add_api_route("/v1/models", broken, methods=["DELETE"])
    app.add_api_route("/v1/runs", broken, methods=["DELETE"])
    with serving_in_thread(app, "the loop") as base:
        facade = httpx.delete(f"{base}/v1/models")
        own = httpx.delete(f"{base}/v1/runs")
    assert facade.status_code == own.status_code == 500
    assert openai_error_body(facade)["type"] == "InternalServerError"
    assert own.json() == {"detail": "internal error"}
    assert "internal detail" not in facade.text + own.text


# --- one run, one shape ---------------------------------------------------------------------


def test_a_run_is_one_shape_in_its_answer_its_stream_its_record_and_a_retrys_answer(stack):
    answered = post_run(stack, {"input": QUESTION, "run_id": "one-shape-1"}).json()
    _, streamed = stream_run(stack.loop, {"input": QUESTION, "run_id": "one-shape-2"})
    record = httpx.get(f"{stack.loop}/v1/runs/{answered['id']}", headers=EMPLOYEE).json()
    retried = post_run(stack, {"input": QUESTION, "run_id": answered["id"]}).json()
    assert record == answered == retried  # the answer is the record: nothing to reshape
    assert set(streamed.model_dump(mode="json")) == set(answered)
    assert answered["status"] == "completed" and answered["finished_at"] is not None
    [listed] = [
        r
        for r in httpx.get(f"{stack.loop}/v1/runs", headers=EMPLOYEE).json()["runs"]
        if r["id"] == answered["id"]
    ]
    assert listed == {key: answered[key] for key in listed}  # the listing: the same run, less


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
