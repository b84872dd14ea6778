"""The simulator as a real process, driven by the official `openai` client (sync and async)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from .helpers import LEAVE_TOOLS, SEED_REQUEST, SYSTEM

MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SEED_REQUEST}]


@pytest.fixture(scope="module")
def client(sim_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def async_client(sim_url) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0)


def fault(name: str) -> dict[str, dict[str, str]]:
    return {"extra_headers": {"X-Sim-Fault": name}}


def test_non_streaming_tool_call(client):
    response = client.chat.completions.create(
        model="leave-copilot", messages=MESSAGES, tools=LEAVE_TOOLS, temperature=0
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == ""
    [call] = choice.message.tool_calls
    assert call.id.startswith("chatcmpl-tool-") and call.type == "function"
    assert json.loads(call.function.arguments) == {"keyword": "家庭旅遊"}
    usage = response.usage
    assert usage.prompt_tokens > 100 and usage.completion_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_streaming_tool_call_with_usage_matches_the_non_streaming_answer(async_client):
    stream = await async_client.chat.completions.create(
        model="leave-copilot",
        messages=MESSAGES,
        tools=LEAVE_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    starts = [c for c in chunks if c.choices and (c.choices[0].delta.tool_calls or [None])[0]]
    arguments = "".join(c.choices[0].delta.tool_calls[0].function.arguments or "" for c in starts)
    assert starts[0].choices[0].delta.tool_calls[0].function.name == "search_leaves"
    assert json.loads(arguments) == {"keyword": "家庭旅遊"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls"
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    # one streamed delta per generated token
    assert usage.completion_tokens == len(starts)


def test_streaming_text_carries_finish_reason_on_the_last_token(client):
    stream = client.chat.completions.create(
        model="leave-copilot",
        messages=[{"role": "user", "content": "今天天氣如何？"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "差勤助手" in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[-1].usage.completion_tokens == len(content_chunks)


def test_max_tokens_cuts_the_answer_with_finish_reason_length(client):
    response = client.chat.completions.create(
        model="leave-copilot",
        messages=[{"role": "user", "content": "今天天氣如何？"}],
        max_tokens=5,
    )
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 5


def test_a_truncated_tool_call_comes_back_as_text(client):
    response = client.chat.completions.create(
        model="leave-copilot", messages=MESSAGES, tools=LEAVE_TOOLS, max_tokens=4
    )
    message = response.choices[0].message
    assert response.choices[0].finish_reason == "length"
    assert not message.tool_calls and message.content.startswith("<tool_call>")


def test_tool_call_ids_are_unique(client):
    ids = {
        client.chat.completions.create(model="leave-copilot", messages=MESSAGES, tools=LEAVE_TOOLS)
        .choices[0]
        .message.tool_calls[0]
        .id
        for _ in range(20)
    }
    assert len(ids) == 20


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ("none", None),
        ("required", "search_leaves"),
        ({"type": "function", "function": {"name": "get_leave_balance"}}, "get_leave_balance"),
    ],
)
def test_tool_choice_is_honoured(client, tool_choice, expected):
    response = client.chat.completions.create(
        model="leave-copilot",
        messages=[{"role": "user", "content": "今天天氣如何？"}],
        tools=LEAVE_TOOLS,
        tool_choice=tool_choice,
    )
    calls = response.choices[0].message.tool_calls
    assert (calls[0].function.name if calls else None) == expected


def test_models_and_health(client, sim_url):
    assert [m.id for m in client.models.list()] == ["leave-copilot"]
    assert httpx.get(f"{sim_url}/health").status_code == 200


def test_it_says_it_is_a_simulator_where_vllm_says_who_it_is(client, sim_url):
    # vLLM answers /version with {"version": …} and owns its models as "vllm"
    version = httpx.get(f"{sim_url}/version").json()
    assert version["version"] == "0.32.0" and version["simulator"] == "modelsim"
    assert version["profile"] in ("gpu", "instant") and "not a measurement" in version["note"]
    assert {m.owned_by for m in client.models.list()} == {"modelsim"}


def test_unknown_model_is_404_in_vllms_shape(client):
    with pytest.raises(openai.NotFoundError) as error:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert error.value.body["type"] == "NotFoundError"
    assert error.value.body["param"] == "model" and error.value.body["code"] == 404


def test_malformed_body_and_absent_named_tool_are_400(client, sim_url):
    bad_json = httpx.post(
        f"{sim_url}/v1/chat/completions",
        content=b'{"model": "leave-copilot", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == 400
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model="leave-copilot",
            messages=MESSAGES,
            tools=LEAVE_TOOLS,
            tool_choice={"type": "function", "function": {"name": "absent"}},
        )
    assert error.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="leave-copilot", messages=[])


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ([{"type": "text", "text": 123}], "messages[1].content[0].text must be a string"),
        ([{"type": "text"}], "messages[1].content[0].text must be a string"),
        (["plain"], "messages[1].content[0] must be an object"),
        ([{"text": "hi"}], "messages[1].content[0].type must be a string"),
        (123, "messages[1].content must be a string or a list of content parts"),
    ],
)
def test_content_that_is_not_text_is_a_clear_400(sim_url, content, says):
    response = httpx.post(
        f"{sim_url}/v1/chat/completions",
        json={
            "model": "leave-copilot",
            "messages": [MESSAGES[0], {"role": "user", "content": content}],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == says
    assert response.json()["error"]["param"] == "messages[1].content"


ASSISTANT_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "search_leaves", "arguments": '{"keyword": "x"}'},
        }
    ],
}
BAD_TRANSCRIPTS = {
    "unknown role": [*MESSAGES, {"role": "wizard", "content": "hi"}],
    "orphan tool message": [*MESSAGES, {"role": "tool", "tool_call_id": "nope", "content": "{}"}],
    "unanswered tool call": [*MESSAGES, ASSISTANT_CALL, {"role": "user", "content": "and?"}],
    "unanswered at the end": [*MESSAGES, ASSISTANT_CALL],
}


@pytest.mark.parametrize("name", BAD_TRANSCRIPTS)
def test_transcript_errors_are_400_in_strict_mode(client, name):
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model="leave-copilot", messages=BAD_TRANSCRIPTS[name], tools=LEAVE_TOOLS
        )
    assert error.value.body["type"] == "BadRequestError"


def test_lenient_mode_accepts_what_vllm_accepts(start_simulator):
    with start_simulator(profile="instant", validation="lenient") as base:
        lenient = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        for messages in BAD_TRANSCRIPTS.values():
            response = lenient.chat.completions.create(
                model="leave-copilot", messages=messages, tools=LEAVE_TOOLS
            )
            assert response.choices[0].finish_reason in {"stop", "tool_calls"}


# -- fault injection -----------------------------------------------------------------------


def test_fault_http_500(client):
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model="leave-copilot", messages=MESSAGES, **fault("http_500")
        )


def test_fault_http_429_sends_retry_after(client):
    with pytest.raises(openai.RateLimitError) as error:
        client.chat.completions.create(
            model="leave-copilot", messages=MESSAGES, **fault("http_429")
        )
    assert error.value.response.headers["retry-after"] == "1"


def test_fault_stall_holds_the_answer(start_simulator):
    with start_simulator(profile="instant", stall_seconds="0.5") as base:
        stalled = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=0.2)
        with pytest.raises(openai.APITimeoutError):
            stalled.chat.completions.create(
                model="leave-copilot", messages=MESSAGES, **fault("stall")
            )
        started = time.perf_counter()
        patient = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=5)
        patient.chat.completions.create(model="leave-copilot", messages=MESSAGES, **fault("stall"))
        assert time.perf_counter() - started >= 0.5


def _call(client, name: str, messages=MESSAGES):
    response = client.chat.completions.create(
        model="leave-copilot", messages=messages, tools=LEAVE_TOOLS, **fault(name)
    )
    return response.choices[0]


def test_fault_malformed_arguments(client):
    arguments = _call(client, "malformed_arguments").message.tool_calls[0].function.arguments
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)


def test_fault_unknown_tool(client):
    assert _call(client, "unknown_tool").message.tool_calls[0].function.name == "delete_all_leaves"


def test_fault_tool_call_as_text(client):
    choice = _call(client, "tool_call_as_text")
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert '"name": "search_leaves"' in choice.message.content


def test_fault_guessed_id(client):
    call = _call(client, "guessed_id").message.tool_calls[0]
    assert call.function.name == "update_leave_status"
    assert json.loads(call.function.arguments)["leave_id"] == "LV-123456"


def test_fault_skip_step(client):
    found = json.dumps(
        {"count": 1, "leaves": [{"leave_id": "LV-1a2b3c", "status": "draft",
                                 "next_steps": ["submitted"]}]}
    )  # fmt: skip
    messages = [
        *MESSAGES,
        {**ASSISTANT_CALL},
        {"role": "tool", "tool_call_id": "call-1", "content": found},
    ]
    call = _call(client, "skip_step", messages).message.tool_calls[0]
    assert json.loads(call.function.arguments) == {"leave_id": "LV-1a2b3c", "status": "approved"}


def test_fault_endless_tool_calls(client):
    messages = [*MESSAGES]
    for i in range(4):
        choice = _call(client, "endless_tool_calls", messages)
        assert choice.finish_reason == "tool_calls", i
        call = choice.message.tool_calls[0]
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"count": 0, "leaves": []}'},
        ]


def test_fault_parallel_tool_calls(client):
    calls = _call(client, "parallel_tool_calls").message.tool_calls
    assert [c.function.name for c in calls] == ["search_leaves", "get_leave_balance"]
    assert len({c.id for c in calls}) == 2


def test_an_unknown_fault_name_is_a_400(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="leave-copilot", messages=MESSAGES, **fault("nope"))


def test_a_global_fault_applies_without_the_header(start_simulator):
    with start_simulator(profile="instant", fault="http_500") as base:
        faulty = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            faulty.chat.completions.create(model="leave-copilot", messages=MESSAGES)
        # the header overrides the global fault, "" meaning none
        ok = faulty.chat.completions.create(
            model="leave-copilot", messages=MESSAGES, extra_headers={"X-Sim-Fault": ""}
        )
        assert ok.choices[0].finish_reason == "stop"


def test_a_fault_tag_in_the_user_message_works_without_headers(client):
    tagged = [{"role": "user", "content": f"{SEED_REQUEST} [sim-fault:unknown_tool]"}]
    response = client.chat.completions.create(
        model="leave-copilot", messages=tagged, tools=LEAVE_TOOLS
    )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "delete_all_leaves"
    assert json.loads(call.function.arguments) == {"keyword": "家庭旅遊"}  # tag not in keyword
