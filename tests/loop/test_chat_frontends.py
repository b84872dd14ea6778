"""Chat front ends on the OpenAI-compatible facade (issue 33), driven by the real `openai`
client as Open WebUI, LibreChat or a bot sends it — their sampling parameters, Open WebUI's
own tools and its chat id header — against the real services over sockets: drafts submitted,
approved leaves cancelled through a confirmation asked and answered in the conversation, the
front end's housekeeping served without a run, and the bad cases, each checked in the leave
database (status and audit log) and in the run store."""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support import loop_service, mcp_server, model_simulator, wait_until

AGENT = "leave-copilot-agent"
TASKS = "leave-copilot-tasks"
EMPLOYEE_TOKEN, OTHER_TOKEN = "demo-token-employee", "demo-token-other"
CONFIRMATION_TIMEOUT = 6.0
LEAVE_ID = re.compile(r"LV-[0-9a-f]{6}")


def _tool(name: str, **properties: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {p: {"type": t} for p, t in properties.items()}}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


# Open WebUI's built-in tools as it sends them with every chat message (native function calling).
OPEN_WEBUI_TOOLS = [
    _tool("get_current_timestamp"),
    _tool("calculate_timestamp", days_ago="integer", weeks_ago="integer"),
    _tool("search_web", query="string", count="integer"),
    _tool("fetch_url", url="string"),
    _tool("generate_image", prompt="string"),
    _tool("execute_code", code="string"),
    _tool("search_memories", query="string", count="integer"),
    _tool("add_memory", content="string"),
    _tool("replace_memory_content", memory_id="string", content="string"),
    _tool("search_notes", query="string", count="integer"),
    _tool("view_note", note_id="string"),
    _tool("write_note", title="string", content="string"),
    _tool("search_chats", query="string", count="integer"),
]
# What a chat front end sends beside the messages: sampling and length settings (null or at
# their defaults, or set by the person), its own tools, and its chat's id.
FRONT_END: dict[str, Any] = {
    "temperature": 0.2,
    "top_p": 1,
    "max_tokens": 256,
    "stop": None,
    "seed": 1,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "tools": OPEN_WEBUI_TOOLS,
    "tool_choice": "auto",
    "user": "someone@example.com",
}
# Open WebUI's housekeeping after each message (its default task prompts, abridged).
HOUSEKEEPING = {
    "title": "### Task:\nGenerate a concise title summarizing the chat history.\n"
    '### Output:\nJSON format: { "title": "your concise title here" }\n'
    "### Chat History:\n<chat_history>\nUSER: 取消我表妹婚禮那張假\n</chat_history>",
    "follow_ups": "### Task:\nSuggest 3-5 relevant follow-up questions or prompts that the user "
    "might naturally ask next.\n### Chat History:\n<chat_history>\nUSER: 查假單\n</chat_history>",
    "tags": "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat "
    "history.\n### Chat History:\n<chat_history>\nUSER: 查假單\n</chat_history>",
}
# The approved leaves of E001 the tests cancel, one each (the seed's own wedding leave too).
REASONS = (
    *("堂哥婚禮", "逾時確認", "重複回覆", "換人回覆", "登入失效", "沒看到問題", "串流中斷"),
    "重啟確認",
)
STREAM_CUT_DRAFT = "LV-fd0001"  # a draft of E001 the model whose stream stops tries to submit


@dataclass
class Services:
    loop: str
    mcp: str
    model: str
    store_url: str
    mcp_db_url: str
    workdir: Path


@pytest.fixture(scope="module")
def services(tmp_path_factory, new_database_url) -> Iterator[Services]:
    workdir = tmp_path_factory.mktemp("frontends")
    mcp_db_url = new_database_url(workdir, "leave")
    with (
        mcp_server(workdir, mcp_db_url) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(
            workdir,
            f"{sim}/v1",
            f"{mcp}/mcp",
            new_database_url(workdir, "loop"),
            confirmation_timeout_seconds=str(CONFIRMATION_TIMEOUT),
        ) as (loop, store_url),
    ):
        _add_approved_leaves(mcp_db_url)
        yield Services(loop, mcp, f"{sim}/v1", store_url, mcp_db_url, workdir)


def _add_approved_leaves(db_url: str) -> None:
    from mcp_server.storage import Balance, Database, Leave

    database = Database(db_url)
    with database.write() as s:
        for n, reason in enumerate(REASONS):
            day = dt.date(2035, 3, 5) + dt.timedelta(days=n)
            s.add(
                Leave(
                    id=f"LV-fe{n:04x}",
                    employee_id="E001",
                    leave_type="事假",
                    start_date=day,
                    end_date=day,
                    days=1.0,
                    status="approved",
                    reason=reason,
                )
            )
        s.get(Balance, ("E001", "事假")).remaining_days -= len(REASONS)
        day = dt.date(2035, 4, 2)
        s.add(
            Leave(
                id=STREAM_CUT_DRAFT,
                employee_id="E001",
                leave_type="事假",
                start_date=day,
                end_date=day,
                days=1.0,
                status="draft",
                reason="串流草稿",
            )
        )
    database.dispose()


def client(services: Services, token: str = EMPLOYEE_TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{services.loop}/v1", api_key=token, max_retries=0)


def say(
    services: Services,
    messages: list[dict[str, str]],
    *,
    stream: bool = False,
    token: str = EMPLOYEE_TOKEN,
    chat_id: str | None = None,
    front_end: bool = True,
    **extra: Any,
) -> tuple[str, httpx.Headers, dict[str, Any]]:
    """One chat message as a front end sends it (`front_end` false: as a bare OpenAI client):
    (the assistant's text, the response's headers, the completion's `run`)."""
    headers = {"X-OpenWebUI-Chat-Id": chat_id} if chat_id else {}
    raw = client(services, token).chat.completions.with_raw_response.create(
        model=AGENT,
        messages=messages,
        stream=stream,
        extra_headers=headers,
        **{**(FRONT_END if front_end else {}), **extra},
    )
    completion = raw.parse()
    if not stream:
        run = (completion.model_extra or {}).get("run") or {}
        return completion.choices[0].message.content or "", raw.headers, run
    chunks = list(completion)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, raw.headers, {}


def conversation(services: Services, chat_id: str | None = None, *, stream: bool = False):
    """A conversation as a front end keeps it: each message sent with the history so far."""
    messages: list[dict[str, str]] = []

    def send(text: str, **extra: Any) -> str:
        messages.append({"role": "user", "content": text})
        answer, _, _ = say(services, messages, stream=stream, chat_id=chat_id, **extra)
        messages.append({"role": "assistant", "content": answer})
        return answer

    return send


def leave(services: Services, leave_id: str) -> tuple[str, list[tuple[str | None, str]]]:
    """(status, the audit log's (confirmation, outcome) of cancel_approved_leave) of a leave."""
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        service = LeaveService(database)
        status = service.visible_leave("M001", leave_id).status
        trail = [
            (e.confirmation, e.outcome)
            for e in service.audit_trail(leave_id)
            if e.tool == "cancel_approved_leave"
        ]
    finally:
        database.dispose()
    return status, trail


def leave_rows(services: Services) -> tuple[list[tuple[Any, ...]], int]:
    """Every leave (id, status) and the audit log's length: what the leave system holds."""
    from sqlalchemy import func, select

    from mcp_server.storage import AuditEntry, Database, Leave

    database = Database(services.mcp_db_url)
    try:
        with database.read() as s:
            leaves = [(row.id, row.status) for row in s.scalars(select(Leave).order_by(Leave.id))]
            audited = s.scalar(select(func.count()).select_from(AuditEntry)) or 0
    finally:
        database.dispose()
    return leaves, audited


def run_ids(services: Services) -> set[str]:
    from loop.store import RunRecord, RunStore

    store = RunStore(services.store_url)
    try:
        with store.sync._session() as s:
            return set(s.scalars(RunRecord.__table__.select().with_only_columns(RunRecord.id)))
    finally:
        store.dispose()


def is_question(text: str, leave_id: str | None = None) -> bool:
    return (
        "確定要取消已核准的假單" in text
        and "確認代號：run_" in text
        and (leave_id is None or leave_id in text)
    )


# --- parameters and the front end's own tools ------------------------------------------------


def test_the_draft_is_submitted_with_a_front_ends_parameters_and_tools(services):
    draft = "把我那張家庭旅遊的特休送出審核"
    answer, headers, run = say(services, [{"role": "user", "content": draft}])
    [leave_id] = LEAVE_ID.findall(answer)
    assert leave(services, leave_id)[0] == "submitted", answer
    # the values that ask for something the agent does not do are named; nulls and defaults not
    assert headers["x-leave-ignored-parameters"] == "temperature, seed, max_tokens, tools"
    assert headers["warning"].startswith('299 - "temperature, seed ignored: ')
    assert (
        "tools ignored: the agent acts only with the leave MCP server's tools"
        in (headers["warning"])
    )
    # the agent offered the model the leave tools only, and called them only
    record = httpx.get(
        f"{services.loop}/v1/runs/{run['id']}",
        headers={"Authorization": f"Bearer {EMPLOYEE_TOKEN}"},
    ).json()
    assert [s["name"] for s in record["steps"] if s["type"] == "tool"] == [
        "search_leaves",
        "update_leave_status",
    ]
    assert run["status"] == "completed" and headers["x-leave-run-id"] == run["id"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_front_end_at_its_defaults_gets_no_warning(services, stream):
    quiet = {"temperature": 0, "top_p": 1, "seed": None, "max_tokens": None, "tools": []}
    answer, headers, _ = say(
        services, [{"role": "user", "content": "我的假期餘額還有多少？"}], stream=stream, **quiet
    )
    assert "特休" in answer
    assert "warning" not in headers and "x-leave-ignored-parameters" not in headers


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"n": 2}, "n", "one choice"),
        ({"logprobs": True}, "logprobs", "no log probabilities"),
        ({"top_logprobs": 3}, "top_logprobs", "no log probabilities"),
        ({"response_format": {"type": "json_object"}}, "response_format", "never JSON"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
            "never JSON",
        ),
        ({"temperature": 3}, "temperature", "from 0 to 2"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"frobnicate": 1}, "frobnicate", "not supported"),
    ],
)
def test_what_would_change_the_answer_is_a_400_naming_it(services, extra, param, says):
    with pytest.raises(openai.BadRequestError) as error:
        client(services).chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "查假單"}], extra_body=extra
        )
    assert error.value.body["param"] == param, error.value.body
    assert error.value.body["message"].startswith(f"{param}: ")
    assert says in error.value.body["message"], error.value.body


@pytest.mark.parametrize("stream", [False, True])
def test_stop_ends_the_answer_before_the_stop_string(services, stream):
    question = [{"role": "user", "content": "我的假期餘額還有多少？"}]
    whole, _, _ = say(services, question, stream=stream)
    assert "天" in whole
    cut, headers, _ = say(services, question, stream=stream, stop=["天"])
    assert cut == whole[: whole.index("天")]
    assert (
        "x-leave-ignored-parameters" not in headers
        or "stop" not in (headers["x-leave-ignored-parameters"])
    )


# --- confirmations in the conversation --------------------------------------------------------


def test_a_cancellation_asks_instead_of_saying_nobody_confirmed(services):
    """The facade used to decline every confirmation and then answer 「你沒有確認取消」."""
    request = [{"role": "user", "content": "取消我表妹婚禮那張假"}]
    answer, _, run = say(services, request, front_end=False)
    [leave_id] = LEAVE_ID.findall(answer)
    assert "沒有確認" not in answer and is_question(answer, leave_id), answer
    assert "2 天" in answer and "退回假期額度" in answer and "「確認」" in answer
    assert run == {"id": run["id"], "status": "running", "confirmation_id": run["confirmation_id"]}
    assert leave(services, leave_id) == ("approved", [])  # nothing done, nothing audited yet
    # the question stays open for this conversation: said "no", it is declined
    later, _, _ = say(
        services,
        [*request, {"role": "assistant", "content": answer}, {"role": "user", "content": "不要"}],
        front_end=False,
    )
    assert leave(services, leave_id) == ("approved", [("declined", "not_applied")]), later


@pytest.mark.parametrize(
    ("stream", "chat_id", "request_text", "reason"),
    [
        (False, "owui-chat-wedding", "取消我表妹婚禮那張假", "表妹婚禮"),
        (True, None, "取消我堂哥婚禮那張假", "堂哥婚禮"),
    ],
    ids=["json-with-chat-id", "stream-by-history"],
)
def test_the_wedding_leave_is_cancelled_in_the_conversation_declined_then_accepted(
    services, stream, chat_id, request_text, reason
):
    leave_id = _approved_leave(services, reason)
    _, before = leave(services, leave_id)  # the seed's: declined once by the test above
    send = conversation(services, chat_id, stream=stream)
    asked = send(request_text)
    assert is_question(asked, leave_id), asked
    kept = send("不要")
    assert "沒有確認取消" in kept and leave_id in kept, kept
    assert leave(services, leave_id) == ("approved", [*before, ("declined", "not_applied")])
    asked_again = send(request_text)
    assert is_question(asked_again, leave_id), asked_again
    done = send("確認")
    assert f"已取消假單 {leave_id}" in done, done
    assert leave(services, leave_id) == (
        "cancelled",
        [*before, ("declined", "not_applied"), ("accepted", "applied")],
    )


def _approved_leave(services: Services, reason: str) -> str:
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    try:
        found = LeaveService(database).search("E001", reason, "approved")
    finally:
        database.dispose()
    [only] = found
    return only.leave_id


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        *[(word, "accept") for word in ("好", "確認", "是", "對", "yes", "OK", "好，請取消")],
        *[(word, "accept") for word in ("確認取消", "Yes, cancel it.", "ＯＫ！", "好的謝謝")],
        *[(word, "decline") for word in ("不要", "不", "算了", "no", "不要取消", "No.")],
        *[(word, "decline") for word in ("不用了，謝謝", "先不要", "否", "Nope")],
        *[(word, None) for word in ("取消", "cancel", "不確定", "好不好", "嗯", "？")],
        *[(word, None) for word in ("好，但先不要", "查一下我的假單", "是不是要扣假？", "")],
    ],
)
def test_yes_and_no_in_the_words_people_use(said, meant):
    from loop.api.facade_confirm import read_answer

    assert read_answer(said) == meant


def test_a_message_that_is_no_answer_asks_the_question_again(services):
    send = conversation(services, stream=True)
    asked = send("取消我沒看到問題那張假")
    [leave_id] = LEAVE_ID.findall(asked)
    again = send("取消")  # to "cancel …?" it may mean yes or no: it is neither
    assert again.startswith("還在等你回覆這個確認") and is_question(again, leave_id)
    again = send("順便查一下我的假單")
    assert again.startswith("還在等你回覆這個確認") and is_question(again, leave_id)
    assert leave(services, leave_id) == ("approved", [])
    assert "沒有確認取消" in send("算了")
    assert leave(services, leave_id) == ("approved", [("declined", "not_applied")])


def test_a_conversation_id_reused_by_another_employee_reaches_no_one_elses_run(services):
    chat_id = "owui-chat-shared-by-mistake"
    asked, _, run = say(
        services, [{"role": "user", "content": "取消我換人回覆那張假"}], chat_id=chat_id
    )
    [leave_id] = LEAVE_ID.findall(asked)
    history = [
        {"role": "user", "content": "取消我換人回覆那張假"},
        {"role": "assistant", "content": asked},
        {"role": "user", "content": "確認"},
    ]
    with pytest.raises(openai.ConflictError) as refused:
        say(services, history, token=OTHER_TOKEN, chat_id=chat_id)
    assert refused.value.body["param"] == "x-openwebui-chat-id"
    assert "another user's" in refused.value.body["message"]
    # without the header, the other employee's "yes" to the employee's question reaches nothing
    answer, _, _ = say(services, history, token=OTHER_TOKEN)
    assert answer.startswith("找不到這個確認") and "run" not in answer.split("找不到")[0]
    assert leave(services, leave_id) == ("approved", [])
    # the employee's own front end, sending only the new message with the chat's id: answered
    answer, _, _ = say(services, [{"role": "user", "content": "不要"}], chat_id=chat_id)
    assert "沒有確認取消" in answer
    assert leave(services, leave_id) == ("approved", [("declined", "not_applied")])
    record = httpx.get(
        f"{services.loop}/v1/runs/{run['id']}",
        headers={"Authorization": f"Bearer {EMPLOYEE_TOKEN}"},
    ).json()
    assert record["status"] == "completed" and record["session_id"].startswith("chat-")


def test_a_transcript_without_the_question_cannot_answer_it(services):
    """With the chat id the waiting question is found, but the person's transcript does not
    show it (its completion was cut off): a 「確認」 then is no answer to it."""
    chat_id = "owui-chat-cut-off"
    asked, _, _ = say(
        services, [{"role": "user", "content": "取消我串流中斷那張假"}], chat_id=chat_id
    )
    [leave_id] = LEAVE_ID.findall(asked)
    lost = [
        {"role": "user", "content": "取消我串流中斷那張假"},
        {"role": "assistant", "content": "（回覆中斷）"},
        {"role": "user", "content": "確認"},
    ]
    again, _, _ = say(services, lost, chat_id=chat_id)
    assert again.startswith("還在等你回覆這個確認") and is_question(again, leave_id)
    assert leave(services, leave_id) == ("approved", [])
    answered, _, _ = say(services, [*lost[:2], {"role": "assistant", "content": again},
                                    {"role": "user", "content": "不要"}], chat_id=chat_id)  # fmt: skip
    assert leave(services, leave_id) == ("approved", [("declined", "not_applied")]), answered


def test_a_confirmation_answered_twice_is_applied_once(services):
    history = [{"role": "user", "content": "取消我重複回覆那張假"}]
    asked, _, _ = say(services, history)
    [leave_id] = LEAVE_ID.findall(asked)
    history += [{"role": "assistant", "content": asked}, {"role": "user", "content": "確認"}]
    answers: list[Any] = []

    def answer() -> None:
        try:
            answers.append(say(services, history)[0])
        except openai.ConflictError as error:
            answers.append(error)

    both = [threading.Thread(target=answer) for _ in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    done = [a for a in answers if isinstance(a, str) and a.startswith("已取消假單")]
    assert len(done) == 1, answers
    [other] = [a for a in answers if a is not done[0]]
    assert isinstance(other, openai.ConflictError) or other.startswith("這個確認已經回覆過了")
    # the front end regenerates the answer later: told what happened, nothing done again
    again, _, _ = say(services, history)
    assert again == f"這個確認已經回覆過了，不會再執行一次。當時的結果：{done[0]}"
    assert leave(services, leave_id) == ("cancelled", [("accepted", "applied")])


def test_a_question_nobody_answers_in_time_is_said_to_have_expired(services):
    history = [{"role": "user", "content": "取消我逾時確認那張假"}]
    asked, _, run = say(services, history)
    [leave_id] = LEAVE_ID.findall(asked)
    assert f"{CONFIRMATION_TIMEOUT:.0f} 秒內沒有回覆就不會執行" in asked
    headers = {"Authorization": f"Bearer {EMPLOYEE_TOKEN}"}
    wait_until(
        lambda: (
            httpx.get(f"{services.loop}/v1/runs/{run['id']}", headers=headers).json()["status"]
            != "running"
        ),
        timeout=CONFIRMATION_TIMEOUT + 20,
        what="the unanswered confirmation to expire",
    )
    history += [{"role": "assistant", "content": asked}, {"role": "user", "content": "好"}]
    late, _, _ = say(services, history)
    assert late.startswith("這個確認已經逾時") and "沒有執行" in late, late
    assert leave(services, leave_id) == ("approved", [("cancelled", "not_applied")])


def test_a_token_revoked_mid_conversation_changes_nothing(services):
    from mcp_server.identity import Identities
    from mcp_server.storage import Database

    database = Database(services.mcp_db_url)
    token, public_id = Identities(database).issue("E001", label="front end")
    history = [{"role": "user", "content": "取消我登入失效那張假"}]
    asked, _, _ = say(services, history, token=token)
    [leave_id] = LEAVE_ID.findall(asked)
    Identities(database).revoke(public_id)
    database.dispose()
    history += [{"role": "assistant", "content": asked}, {"role": "user", "content": "確認"}]
    answer, _, run = say(services, history, token=token)
    assert "登入已失效" in answer and run["status"] == "failed", answer
    with pytest.raises(openai.AuthenticationError):
        say(services, history, token=token)
    assert leave(services, leave_id)[0] == "approved"


def test_a_question_outlives_a_loop_restart(services, new_database_url):
    """The loop stops while the question waits; the loop that starts next on the same store
    takes the run over, and the person's answer in the conversation goes on with it."""
    store = new_database_url(services.workdir, "restarted-loop")
    chat = {"X-OpenWebUI-Chat-Id": "owui-chat-restart"}
    asked_for = [{"role": "user", "content": "取消我重啟確認那張假"}]
    answers = []
    for message in (None, "確認"):
        with loop_service(
            services.workdir,
            services.model,
            f"{services.mcp}/mcp",
            store,
            confirmation_timeout_seconds="60",
            instance_id="facade-restart",  # its own runs: taken over at once, no lease to wait
        ) as (loop, _):
            front_end = openai.OpenAI(base_url=f"{loop}/v1", api_key=EMPLOYEE_TOKEN, max_retries=0)
            if message is not None:
                asked_for += [
                    {"role": "assistant", "content": answers[-1]},
                    {"role": "user", "content": message},
                ]
            stream = front_end.chat.completions.create(
                model=AGENT, messages=asked_for, stream=True, extra_headers=chat, **FRONT_END
            )
            answers.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    [leave_id] = LEAVE_ID.findall(answers[0])
    assert is_question(answers[0], leave_id)
    assert answers[1] == f"已取消假單 {leave_id}，1 天已退回假期額度。"
    assert leave(services, leave_id) == ("cancelled", [("accepted", "applied")])


# --- housekeeping -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", [TASKS, AGENT])
def test_housekeeping_is_served_without_a_run_and_without_the_leave_system(services, model):
    runs, held = run_ids(services), leave_rows(services)
    tool_calls = _mcp_tool_calls(services)
    for kind, prompt in HOUSEKEEPING.items():
        raw = client(services).chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=1000,
            temperature=0.1,
            extra_headers={"X-OpenWebUI-Chat-Id": "owui-chat-housekeeping"},
        )
        answer = raw.parse()
        assert answer.choices[0].message.content, kind
        assert answer.usage.completion_tokens > 0, kind
        assert "x-leave-run-id" not in raw.headers and not answer.model_extra.get("run")
        # more than LOOP_TASK_MAX_TOKENS asked: lowered, and said so
        assert "max_tokens lowered to LOOP_TASK_MAX_TOKENS (512)" in raw.headers["warning"]
    stream = client(services).chat.completions.create(
        model=model, messages=[{"role": "user", "content": HOUSEKEEPING["tags"]}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert run_ids(services) == runs  # no run recorded, so none exported
    assert leave_rows(services) == held
    assert _mcp_tool_calls(services) == tool_calls  # no tool called


def test_open_webuis_own_tool_picking_is_answered_with_none_of_them(services):
    picking = (
        "Available Tools: [...]\n\nYour task is to choose and return the correct tool(s) from "
        "the list of available tools based on the query."
    )
    runs = run_ids(services)
    answer = client(services).chat.completions.create(
        model=AGENT,
        messages=[{"role": "system", "content": picking}, {"role": "user", "content": "取消假單"}],
    )
    assert answer.choices[0].message.content == '{"tool_calls": []}'
    assert run_ids(services) == runs


def test_housekeeping_needs_a_token_and_the_models_list_both_ids(services):
    with pytest.raises(openai.AuthenticationError):
        client(services, "not-a-known-token").chat.completions.create(
            model=TASKS, messages=[{"role": "user", "content": HOUSEKEEPING["title"]}]
        )
    listed = httpx.get(f"{services.loop}/v1/models").json()["data"]
    assert [m["id"] for m in listed] == [AGENT, TASKS]


def _mcp_tool_calls(services: Services) -> float:
    text = httpx.get(f"{services.mcp}/metrics").text
    return sum(
        float(v) for v in re.findall(r"^leave_mcp_tool_calls_total\{[^}]*\} (\S+)$", text, re.M)
    )


# --- bad input --------------------------------------------------------------------------------


def test_a_20_mb_message_is_a_413_and_a_long_request_a_400(services):
    held = leave_rows(services)
    with pytest.raises(openai.APIStatusError) as huge:
        say(services, [{"role": "user", "content": "查" * 20_000_000}])
    assert huge.value.status_code == 413
    with pytest.raises(openai.BadRequestError) as long:
        say(services, [{"role": "user", "content": "查" * 4001}])
    assert long.value.body["param"] == "messages[0].content"
    assert "at most 4000 characters" in long.value.body["message"]
    assert leave_rows(services) == held


def test_a_malformed_conversation_id_is_a_400_naming_the_header(services):
    with pytest.raises(openai.BadRequestError) as error:
        client(services).chat.completions.create(
            model=AGENT,
            messages=[{"role": "user", "content": "查假單"}],
            extra_headers={"X-Conversation-Id": "x" * 201},
        )
    assert error.value.body["param"] == "x-conversation-id"


@pytest.mark.parametrize(
    ("turn", "says"),
    [
        ("tool_call", "model_error: connection_error after 2 attempts"),
        ("text", "model_error: the model's stream stopped midway through its answer"),
    ],
)
def test_a_model_stream_that_stops_midway_is_a_clear_error_and_acts_on_nothing(
    services, turn, says
):
    """The model's stream ends before its turn does (no finish_reason, no [DONE]): a turn that
    is a whole call submitting a draft, or half an answer. The half turn is never acted on
    (the draft stays a draft; a call is asked again once, as after a lost connection), and
    the person is told the run failed, without the half answer."""
    from tests.support import serving_in_thread

    cut_model = _model_that_stops_midway(turn, STREAM_CUT_DRAFT)
    with (
        serving_in_thread(cut_model, "a model whose stream stops midway") as model,
        loop_service(
            services.workdir,
            f"{model}/v1",
            f"{services.mcp}/mcp",
            model_max_retries="1",
            model_retry_backoff_seconds="0.01",
        ) as (loop, _),
    ):
        cut = openai.OpenAI(base_url=f"{loop}/v1", api_key=EMPLOYEE_TOKEN, max_retries=0)
        stream = cut.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "把串流草稿送出審核"}], stream=True
        )
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("（執行未完成：failed，") and says in text, text
    assert "半句" not in text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert cut_model.state.calls == (2 if turn == "tool_call" else 1)
    assert leave(services, STREAM_CUT_DRAFT)[0] == "draft"


def _model_that_stops_midway(turn: str, leave_id: str) -> Any:
    """An OpenAI-compatible model whose streamed turn stops before its end (no finish_reason,
    no [DONE]): a whole update_leave_status call, or the start of an answer."""
    import json

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    arguments = json.dumps({"leave_id": leave_id, "status": "submitted"})
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "update_leave_status", "arguments": arguments}}  # fmt: skip
    delta = {"tool_calls": [call]} if turn == "tool_call" else {"content": "好的，這是半句"}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", **delta},
                          "finish_reason": None}]}  # fmt: skip

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "leave-copilot"}]})

    async def completions(_request: Request) -> StreamingResponse:
        app.state.calls += 1

        async def body() -> Any:
            yield f"data: {json.dumps(chunk)}\n\n".encode()

        return StreamingResponse(body(), media_type="text/event-stream")

    routes = [
        Route("/v1/models", models),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.calls = 0
    return app
