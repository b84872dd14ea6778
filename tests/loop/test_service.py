"""The loop service end to end: the real MCP server, the simulator and the loop as processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading

import httpx
import openai
import pytest

from common.runs_protocol import ConfirmAction, ConfirmationRequested, ConfirmationResolved
from tests.support import REPO_ROOT

from .helpers import EMPLOYEE, MANAGER, OTHER, leave_status, post_run, stream_run, tool_steps

SEED_REQUEST = "把我那張家庭旅遊的特休送出審核"


def test_seed_request_submits_the_draft_with_the_real_id(stack):
    response = post_run(stack, {"input": SEED_REQUEST})
    final = response.json()
    assert response.status_code == 200 and final["status"] == "completed", final
    steps = tool_steps(final)
    assert [name for name, _ in steps] == ["search_leaves", "update_leave_status"]
    real_id = final["steps"][1]["result"]["leaves"][0]["leave_id"]
    assert steps[1][1] == {"leave_id": real_id, "status": "submitted"}
    assert final["answer"] == f"已將 {real_id} 送出審核。"
    assert leave_status(stack, real_id) == "submitted"
    assert final["usage"]["prompt_tokens"] > 0 and final["turns"] == 3
    record = httpx.get(f"{stack.loop}/v1/runs/{final['id']}", headers=EMPLOYEE).json()
    assert record["status"] == "completed" and len(record["steps"]) == len(final["steps"])


def wedding_id(stack) -> str:
    found = post_run(stack, {"input": "查一下我表妹婚禮的假單"}).json()
    return found["steps"][1]["result"]["leaves"][0]["leave_id"]


def test_cancel_declined_keeps_the_leave_then_accepted_cancels_it(stack):
    leave_id = wedding_id(stack)
    events, final = stream_run(stack.loop, {"input": "取消我表妹婚禮那張假"}, answer="decline")
    kinds = [e.event for e in events]
    assert "confirmation.requested" in kinds and (
        "confirmation.resolved",
        {"outcome": "declined"},
    ) in [(e.event, {"outcome": getattr(e, "outcome", None)}) for e in events]
    assert final.status == "completed" and "維持已核准" in final.answer
    assert leave_status(stack, leave_id) == "approved"
    # the answer names the question it answers, so a client with several open knows which
    (asked,) = [e for e in events if isinstance(e, ConfirmationRequested)]
    (resolved,) = [e for e in events if isinstance(e, ConfirmationResolved)]
    assert resolved.confirmation_id == asked.confirmation_id is not None

    # answered by the run's `confirm` setting, no person was asked: no question to name
    events, _ = stream_run(stack.loop, {"input": "取消我表妹婚禮那張假", "confirm": "decline"})
    assert not [e for e in events if isinstance(e, ConfirmationRequested)]
    (resolved,) = [e for e in events if isinstance(e, ConfirmationResolved)]
    assert resolved.outcome == "declined" and resolved.confirmation_id is None

    events, final = stream_run(stack.loop, {"input": "取消我表妹婚禮那張假"}, answer="accept")
    assert final.answer.startswith("已取消假單") and leave_status(stack, leave_id) == "cancelled"
    order = [e.event for e in events]
    assert order[0] == "run.started" and order[-1] == "run.finished"
    last = len(order) - 1 - order[::-1].index("tool.started")  # the cancel call
    assert order[last:].index("confirmation.requested") < order[last:].index("tool.finished")


def test_an_unanswered_confirmation_times_out_as_cancel(stack):
    found = post_run(stack, {"input": "查一下年度健康檢查的假單"}, MANAGER).json()
    leave_id = found["steps"][1]["result"]["leaves"][0]["leave_id"]
    _, final = stream_run(stack.loop, {"input": "取消我年度健康檢查那張假"}, MANAGER, answer=None)
    assert final.status == "completed" and leave_id in final.answer
    assert leave_status(stack, leave_id) == "approved"
    cancel_step = next(s for s in final.steps if s.name == "cancel_approved_leave")
    assert cancel_step.result["error"]["code"] == "confirmation_cancelled"


def test_non_streaming_runs_decline_by_default(stack):
    found = post_run(stack, {"input": "查一下畢業典禮的假單"}, OTHER).json()
    leave_id = found["steps"][1]["result"]["leaves"][0]["leave_id"]
    final = post_run(stack, {"input": "取消我畢業典禮那張假"}, OTHER).json()
    assert "維持已核准" in final["answer"]
    assert leave_status(stack, leave_id) == "approved"


def test_a_follow_up_in_the_same_session_acts_on_the_leave_just_discussed(stack):
    first = post_run(stack, {"input": "查一下加班補休的假單"}, OTHER).json()
    leave_id = first["steps"][1]["result"]["leaves"][0]["leave_id"]
    second = post_run(
        stack, {"input": "剛剛那張也送出審核", "session_id": first["session_id"]}, OTHER
    ).json()
    assert second["session_id"] == first["session_id"]
    assert tool_steps(second) == [
        ("update_leave_status", {"leave_id": leave_id, "status": "submitted"})
    ]
    assert leave_status(stack, leave_id) == "submitted"
    # another user cannot continue (or read) that session
    foreign = post_run(
        stack, {"input": "剛剛那張也送出審核", "session_id": first["session_id"]}
    ).json()
    assert foreign["session_id"] != first["session_id"]
    assert httpx.get(f"{stack.loop}/v1/runs/{first['id']}", headers=EMPLOYEE).status_code == 404


def test_a_session_id_first_used_by_one_user_never_collects_anothers_run(stack):
    """One user waits on a confirmation in a brand-new session; meanwhile another user runs
    with the same session id and finishes first. Neither history may hold the other's run."""
    from common.credentials import hash_token
    from loop.store import RunStore

    session = "raced-session"
    others: list[httpx.Response] = []

    def meanwhile(_run_id: str, _question: object) -> ConfirmAction:
        """While the manager's run waits, the employee's run in the session finishes."""
        others.append(post_run(stack, {"input": "我的假期餘額還有多少？", "session_id": session}))
        assert others[-1].json()["status"] == "completed"
        return "decline"

    waiting = {"input": "取消我年度健康檢查那張假", "session_id": session}
    # the answer may come after the stack's 1.5 s confirmation timeout: the run ends either way
    _, manager_run = stream_run(stack.loop, waiting, MANAGER, meanwhile, tolerate_gone=True)
    manager_final = manager_run.model_dump(mode="json")
    employee_final = others[0].json()
    assert manager_final["session_id"] == session  # the first user owns it
    assert employee_final["session_id"] != session
    store = RunStore(stack.store_url)
    try:
        for final, token, text in (
            (manager_final, "demo-token-manager", "取消我年度健康檢查那張假"),
            (employee_final, "demo-token-employee", "我的假期餘額還有多少？"),
        ):
            history = store.sync.history(final["session_id"], hash_token(token))
            assert [m["content"] for m in history if m["role"] == "user"] == [text]
    finally:
        store.dispose()


@pytest.mark.parametrize(
    ("fault", "status", "check"),
    [
        ("http_500", "failed", lambda f: "http_500" in f["reason"]),
        # one retry, after the simulator's Retry-After of 1 s
        (
            "http_429",
            "failed",
            lambda f: "http_429" in f["reason"] and f["steps"][0]["duration_ms"] >= 1000,
        ),
        ("stall", "failed", lambda f: "timeout" in f["reason"]),
        (
            "malformed_arguments",
            "completed",
            lambda f: f["steps"][1]["error"] == "invalid_arguments",
        ),
        ("unknown_tool", "completed", lambda f: f["steps"][1]["error"] == "unknown_tool"),
        ("tool_call_as_text", "failed", lambda f: f["reason"] == "tool_call_in_content"),
        (
            "guessed_id",
            "completed",
            lambda f: f["steps"][1]["result"]["error"]["code"] == "unknown_leave_id",
        ),
        (
            "skip_step",
            "completed",
            lambda f: f["steps"][3]["result"]["error"]["code"] == "wrong_step",
        ),
        ("endless_tool_calls", "max_turns", lambda f: f["turns"] == 8),
        (
            "parallel_tool_calls",
            "completed",
            lambda f: (
                [s["name"] for s in f["steps"][1:3]] == ["search_leaves", "get_leave_balance"]
            ),
        ),
    ],
)
def test_each_simulator_fault_ends_in_a_clear_result(stack, fault, status, check):
    request = "查一下年度健康檢查的假單"
    if fault == "skip_step":  # needs a draft of the caller's own
        created = post_run(
            stack, {"input": "幫我請 2035-03-05 的事假，事由：跳級測試"}, MANAGER
        ).json()
        assert tool_steps(created)[0][0] == "create_leave", created
        request = "把我那張跳級測試的事假送出審核"
    final = post_run(stack, {"input": f"{request} [sim-fault:{fault}]"}, MANAGER).json()
    assert final["status"] == status, final
    assert check(final), final
    record = httpx.get(f"{stack.loop}/v1/runs/{final['id']}", headers=MANAGER).json()
    assert record["status"] == status  # the record says the same as the response


@pytest.fixture(scope="module")
def approved_leaves(stack) -> dict[int, str]:
    """50 approved leaves of the employee, reasons 「併發確認NN號」, written straight to the DB."""
    from mcp_server.storage import Balance, Database, Leave

    database = Database(stack.mcp_db_url)
    ids = {}
    with database.write() as s:
        for n in range(50):
            leave_id = f"LV-c0{n:04x}"
            ids[n] = leave_id
            s.add(
                Leave(
                    id=leave_id,
                    employee_id="E001",
                    leave_type="事假",
                    start_date=dt.date(2034, 1, 2) + dt.timedelta(days=n),
                    end_date=dt.date(2034, 1, 2) + dt.timedelta(days=n),
                    days=1.0,
                    status="approved",
                    reason=f"併發確認{n:02d}號",
                )
            )
        s.get(Balance, ("E001", "事假")).remaining_days -= 50
    database.dispose()

    return ids


def test_fifty_concurrent_streaming_runs_each_get_their_own_confirmation(stack, approved_leaves):
    ids = approved_leaves
    finals: dict[int, dict] = {}
    errors: list[BaseException] = []

    def one(n: int) -> None:
        try:
            answer = "accept" if n % 2 == 0 else "decline"
            _, finals[n] = stream_run(
                stack.loop, {"input": f"取消我併發確認{n:02d}號那張假"}, answer=answer
            )
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    for n, final in finals.items():
        expected = "cancelled" if n % 2 == 0 else "approved"
        assert leave_status(stack, ids[n]) == expected, (n, final.answer)
        assert ids[n] in final.answer


def confirmation_audit(stack, leave_id: str) -> list[tuple[str, str]]:
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(stack.mcp_db_url)
    try:
        trail = LeaveService(database).audit_trail(leave_id)
    finally:
        database.dispose()
    return [(e.confirmation, e.outcome) for e in trail if e.tool == "cancel_approved_leave"]


def test_cancel_endpoint_stops_a_waiting_run_and_keeps_the_transcript_valid(stack, approved_leaves):
    from common.credentials import hash_token
    from loop.store import RunStore

    audited = confirmation_audit(stack, approved_leaves[3])
    # cancel the run while it waits for the human
    answers: list[httpx.Response] = []

    def cancel_it(run_id: str, _question: object) -> None:
        cancel = f"{stack.loop}/v1/runs/{run_id}/cancel"
        answers.append(httpx.post(cancel, headers=EMPLOYEE, timeout=30))
        return None  # the run's question is never answered

    _, final = stream_run(stack.loop, {"input": "取消我併發確認03號那張假"}, EMPLOYEE, cancel_it)
    run_id = final.id
    (cancelled,) = (answer.json() for answer in answers)
    assert final.status == "cancelled"
    assert cancelled["status"] == "cancelled"
    cancel_step = next(s for s in cancelled["steps"] if s["name"] == "cancel_approved_leave")
    # Cut off, or back with the server's answer to the "cancel" the loop sent it first.
    assert cancel_step["error"] == "cancelled" or (
        cancel_step["result"]["error"]["code"] == "confirmation_cancelled"
    ), cancel_step
    assert leave_status(stack, approved_leaves[3]) == "approved"
    # The MCP server heard that the confirmation was abandoned, and audited it.
    assert confirmation_audit(stack, approved_leaves[3]) == [*audited, ("cancelled", "not_applied")]
    store = RunStore(stack.store_url)
    try:
        record = store.sync.get_run(run_id, hash_token("demo-token-employee"))
    finally:
        store.dispose()
    assert record.status == "cancelled"
    asked = [c["id"] for m in record.messages for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in record.messages if m["role"] == "tool"]
    assert asked and sorted(asked) == sorted(answered)


def test_a_client_that_loses_its_connection_finds_its_run_by_its_own_id(stack):
    body = {"input": "查一下家庭旅遊的假單 [sim-fault:stall]", "run_id": "client-run-0001"}
    with pytest.raises(httpx.ReadTimeout):  # the model stalls; the client gives up waiting
        httpx.post(f"{stack.loop}/v1/runs", json=body, headers=EMPLOYEE, timeout=0.3)

    record = httpx.get(f"{stack.loop}/v1/runs/client-run-0001", headers=EMPLOYEE)
    assert record.status_code == 200 and record.json()["id"] == "client-run-0001"
    mine = httpx.get(f"{stack.loop}/v1/runs", headers=EMPLOYEE).json()["runs"]
    assert mine[0]["id"] == "client-run-0001" and mine[0]["input"] == body["input"]
    theirs = httpx.get(f"{stack.loop}/v1/runs", headers=OTHER).json()["runs"]
    assert "client-run-0001" not in {r["id"] for r in theirs}

    # Retrying with the same id returns that run (waiting for it), and starts no other.
    again = post_run(stack, body)
    assert again.status_code == 200, again.text
    final = again.json()
    assert final["id"] == "client-run-0001" and final["status"] == "failed"
    assert "timeout" in final["reason"]
    assert post_run(stack, body).json() == final
    mine = httpx.get(f"{stack.loop}/v1/runs", headers=EMPLOYEE).json()["runs"]
    assert [r["id"] for r in mine].count("client-run-0001") == 1
    assert sum(r["input"] == body["input"] for r in mine) == 1
    # Another user cannot take or read that id.
    taken = post_run(stack, body, OTHER)
    assert taken.status_code == 409
    assert httpx.get(f"{stack.loop}/v1/runs/client-run-0001", headers=OTHER).status_code == 404


def test_auth_is_required_and_checked_by_the_mcp_server(stack):
    assert httpx.post(f"{stack.loop}/v1/runs", json={"input": "x"}).status_code == 401
    bad = httpx.post(
        f"{stack.loop}/v1/runs", json={"input": "x"}, headers={"Authorization": "Bearer nope"}
    )
    assert bad.status_code == 401
    assert httpx.get(f"{stack.loop}/healthz").status_code == 200
    assert httpx.get(f"{stack.loop}/metrics").status_code == 200


@pytest.mark.parametrize(
    "authorization",
    ["Bearer tökén".encode(), b"Bearer demo token", b"Bearer \xff\xfe"],
)
def test_a_malformed_bearer_token_is_401_without_internals(stack, authorization):
    response = httpx.post(
        f"{stack.loop}/v1/runs", json={"input": "x"}, headers={"Authorization": authorization}
    )
    assert response.status_code == 401, response.text
    assert response.json() == {"detail": "malformed bearer token"}
    assert response.headers["www-authenticate"] == "Bearer"


def test_bad_requests_get_a_clear_422(stack):
    assert post_run(stack, {"input": ""}).status_code == 422
    assert post_run(stack, {"input": "x", "confirm": "always"}).status_code == 422
    assert post_run(stack, {"input": "x", "session_id": "../../etc"}).status_code == 422


def test_facade_through_the_official_openai_client(stack):
    client = openai.OpenAI(base_url=f"{stack.loop}/v1", api_key="demo-token-manager", max_retries=0)
    response = client.chat.completions.create(
        model="leave-copilot-agent",
        messages=[{"role": "user", "content": "我的假期餘額還有多少？"}],
    )
    assert "特休" in response.choices[0].message.content
    assert response.usage.prompt_tokens > 0
    stream = client.chat.completions.create(
        model="leave-copilot-agent",
        messages=[{"role": "user", "content": "我的假期餘額還有多少？"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "特休" in text and chunks[-1].usage.total_tokens > 0
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    ("messages", "says", "param"),
    [
        (
            [{"role": "user", "content": [{"type": "text", "text": 123}]}],
            "messages[0].content[0].text must be a string",
            "messages[0].content",
        ),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
            "the last message must be a user message with text",
            "messages",
        ),
    ],
)
def test_facade_answers_a_malformed_chat_with_a_clear_400(stack, messages, says, param):
    client = openai.OpenAI(base_url=f"{stack.loop}/v1", api_key="demo-token-manager", max_retries=0)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="leave-copilot-agent", messages=messages)
    assert error.value.body["message"] == says and error.value.body["param"] == param


def test_readiness_and_metrics_report_what_happened(stack):
    ready = httpx.get(f"{stack.loop}/readyz").json()
    assert ready == {"status": "ready", "model": "ok", "mcp": "ok"}
    metrics = httpx.get(f"{stack.loop}/metrics").text
    for family in (
        'leave_loop_runs_total{status="completed"}',
        "leave_loop_run_duration_seconds_bucket",
        "leave_loop_run_working_seconds_bucket",
        "leave_loop_confirmation_wait_seconds_bucket",
        "leave_loop_run_turns_bucket",
        "leave_loop_model_call_duration_seconds_bucket",
        'leave_loop_tokens_total{type="prompt"}',
        "leave_loop_tool_call_duration_seconds_bucket",
        "leave_loop_confirmations_total",
        'leave_loop_detections_total{kind="tool_call_in_content"}',
        "leave_loop_model_retries_total",
        "leave_loop_runs_in_flight",
    ):
        assert family in metrics, family


def test_export_writes_completed_runs_as_chat_jsonl(stack, tmp_path):
    post_run(stack, {"input": "我的假期餘額還有多少？"})
    out = tmp_path / "runs.jsonl"
    subprocess.run(
        [sys.executable, "-m", "loop", "export", "-o", str(out), "--no-tool-errors"],
        cwd=REPO_ROOT,
        env={**os.environ, "LOOP_STORE_URL": stack.store_url},
        check=True,
        capture_output=True,
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and all(line["metadata"]["status"] == "completed" for line in lines)
    example = lines[-1]
    assert example["messages"][0]["role"] == "system"
    assert example["messages"][-1]["role"] == "assistant"
    assert {t["function"]["name"] for t in example["tools"]} >= {"search_leaves"}
    calls = [c["id"] for m in example["messages"] for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in example["messages"] if m["role"] == "tool"]
    assert sorted(calls) == sorted(answers)


def test_terminal_client_streams_steps_and_asks_at_the_prompt(stack):
    found = post_run(stack, {"input": "查一下畢業典禮的假單"}, OTHER).json()
    leave_id = found["steps"][1]["result"]["leaves"][0]["leave_id"]
    done = subprocess.run(
        [sys.executable, "-m", "loop.cli", "取消我畢業典禮那張假", "--url", stack.loop],
        cwd=REPO_ROOT,
        env={**os.environ, "LEAVE_TOKEN": "demo-token-other"},
        input="y\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "🔧 search_leaves" in out and "🔧 cancel_approved_leave" in out
    assert "確定要取消已核准的假單" in out and "→ accepted" in out
    assert "已取消假單" in out
    assert leave_status(stack, leave_id) == "cancelled"


def test_the_api_is_documented_as_openapi(stack):
    spec = httpx.get(f"{stack.loop}/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/cancel",
        "/v1/runs/{run_id}/confirmations/{confirmation_id}",
        "/v1/chat/completions",
    } <= paths
    steps = spec["components"]["schemas"]["Run"]["properties"]["steps"]
    assert steps["anyOf"][0]["items"]["$ref"].endswith("/Step")
    assert httpx.get(f"{stack.loop}/docs").status_code == 200
