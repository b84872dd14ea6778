"""End to end: `python -m mcp_server` as a real process, the SDK's Client over a real socket."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support import ServiceProcess, free_port, run_command, run_to_exit, running

from .helpers import Elicitations, error_code, find
from .http_session import INIT, MCP_HEADERS, session
from .invariants import assert_books_balance


@pytest.fixture(scope="module")
def mcp_db_url(tmp_path_factory, new_database_url) -> str:
    return new_database_url(tmp_path_factory.mktemp("mcpdb"))


@pytest.fixture(scope="module")
def mcp_url(tmp_path_factory, mcp_db_url) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("mcp")
    port = free_port()
    env = {"MCP_DATABASE_URL": mcp_db_url, "MCP_PORT": str(port)}
    run_cli("seed", db_url=mcp_db_url)
    base = f"http://127.0.0.1:{port}"
    with running(["mcp_server"], env, tmp / "mcp.log", f"{base}/readyz"):
        yield f"{base}/mcp"


@pytest.mark.parametrize(("mode", "protocol"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_seed_scenario_over_http_in_both_protocol_eras(mcp_url, mode, protocol):
    async with session(mcp_url, "demo-token-employee", mode) as client:
        assert client.protocol_version == protocol
        names = {t.name for t in (await client.list_tools()).tools}
        assert "cancel_approved_leave" in names and len(names) == 5
        trip = (await find(client, "家庭旅遊"))[0]
        if trip["status"] == "draft":  # the second era finds it already submitted
            result = await client.call_tool(
                "update_leave_status", {"leave_id": trip["leave_id"], "status": "submitted"}
            )
            assert not result.is_error, result.content

    # The manager approves, which gives the employee a second approved leave to cancel.
    async with session(mcp_url, "demo-token-manager", mode) as client:
        pending = await find(client, "家庭旅遊", "submitted")
        if pending:
            result = await client.call_tool(
                "update_leave_status", {"leave_id": pending[0]["leave_id"], "status": "approved"}
            )
            assert not result.is_error, result.content

    async with session(mcp_url, "demo-token-employee", mode) as client:
        created = await client.call_tool(
            "create_leave",
            {
                "leave_type": "事假",
                "start_date": "2032-06-07" if mode == "auto" else "2032-06-14",
                "end_date": "2032-06-07" if mode == "auto" else "2032-06-14",
                "reason": f"測試 {mode}",
            },
        )
        target = created.structured_content["leave_id"]
        await client.call_tool("update_leave_status", {"leave_id": target, "status": "submitted"})
    async with session(mcp_url, "demo-token-manager", mode) as client:
        result = await client.call_tool(
            "update_leave_status", {"leave_id": target, "status": "approved"}
        )
        assert not result.is_error, result.content

    for action, expected in (
        ("decline", "approved"),
        ("cancel", "approved"),
        ("accept", "cancelled"),
    ):
        answers = Elicitations(action)
        async with session(mcp_url, "demo-token-employee", mode, answers) as client:
            result = await client.call_tool("cancel_approved_leave", {"leave_id": target})
            assert len(answers.asked) == 1, action
            assert result.is_error is (action != "accept"), result.content
            after = next(v for v in await find(client, target) if v["leave_id"] == target)
            assert after["status"] == expected, action


async def test_one_employee_cannot_see_or_touch_anothers_leave(mcp_url):
    async with session(mcp_url, "demo-token-employee", "auto") as client:
        mine = await find(client, "")
    async with session(mcp_url, "demo-token-other", "auto") as client:
        for leave in mine:
            assert await find(client, leave["leave_id"]) == []
            result = await client.call_tool(
                "update_leave_status", {"leave_id": leave["leave_id"], "status": "submitted"}
            )
            assert error_code(result) == "unknown_leave_id"


async def test_requests_without_a_valid_token_get_401(mcp_url):
    async with httpx.AsyncClient() as http:
        missing = await http.post(mcp_url, json=INIT, headers=MCP_HEADERS)
        wrong = await http.post(
            mcp_url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer nope"}
        )
        metrics = (await http.get(mcp_url.replace("/mcp", "/metrics"))).text
    assert missing.status_code == 401 and "Bearer" in missing.headers["www-authenticate"]
    assert wrong.status_code == 401
    assert 'leave_mcp_auth_failures_total{reason="missing"}' in metrics
    assert 'leave_mcp_auth_failures_total{reason="invalid"}' in metrics


async def test_header_fields_beyond_16_kib_are_refused_431_before_they_are_read(mcp_url):
    """A 5 MB Authorization header was read, hashed and looked up (401); the loop in front
    stops at 16 KiB with 431, and so does the MCP server now."""
    async with httpx.AsyncClient() as http:
        for size in (17_000, 5_000_000):
            answer = await http.post(
                mcp_url, json=INIT,
                headers={**MCP_HEADERS, "Authorization": "Bearer " + "x" * size},
            )  # fmt: skip
            assert answer.status_code == 431, answer.text
            assert answer.json() == {
                "detail": "request header fields too large (limit 16384 bytes)"
            }
        ordinary = await http.post(
            mcp_url, json=INIT,
            headers={**MCP_HEADERS, "Authorization": "Bearer " + "x" * 8000},
        )  # fmt: skip
        assert ordinary.status_code == 401  # under the limit: an unknown token, as ever


async def test_a_host_header_that_is_not_allowed_gets_421(mcp_url):
    headers = {**MCP_HEADERS, "Authorization": "Bearer demo-token-employee"}
    async with httpx.AsyncClient() as http:
        ok = await http.post(mcp_url, json=INIT, headers=headers)
        evil = await http.post(mcp_url, json=INIT, headers={**headers, "Host": "evil.example"})
    assert ok.status_code == 200
    assert evil.status_code == 421


async def test_health_readiness_and_metrics_need_no_token(mcp_url):
    base = mcp_url.removesuffix("/mcp")
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
        assert (await http.get(f"{base}/readyz")).json()["database"] == "ok"
        text = (await http.get(f"{base}/metrics")).text
    for family in (
        "leave_mcp_tool_calls_total",
        "leave_mcp_tool_duration_seconds_bucket",
        "leave_mcp_elicitations_total",
        "leave_mcp_rule_refusals_total",
    ):
        assert family in text


async def test_compose_style_host_is_accepted_when_configured(tmp_path, new_database_url):
    port = free_port()
    env = {
        "MCP_DATABASE_URL": new_database_url(tmp_path),
        "MCP_PORT": str(port),
        "MCP_ALLOWED_HOSTS": "mcp-server:8090,127.0.0.1:*",
    }
    base = f"http://127.0.0.1:{port}"
    with running(["mcp_server"], env, tmp_path / "mcp.log", f"{base}/readyz"):
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{base}/mcp", json=INIT, headers={**MCP_HEADERS, "Host": "mcp-server:8090"}
            )
    # Past the host guard, stopped by auth: the Host was accepted.
    assert response.status_code == 401


def test_production_refuses_default_secrets_and_demo_tokens(tmp_path, new_database_url):
    env = {
        "MCP_DATABASE_URL": new_database_url(tmp_path),
        "MCP_PORT": str(free_port()),
        "MCP_ENV": "production",
    }
    service = ServiceProcess(["mcp_server"], env, tmp_path / "prod.log")
    assert service.process.wait(timeout=30) == 2
    service.stop()
    assert "MCP_ELICITATION_STATE_KEY" in service.log()


def run_cli(*args: str, db_url: str) -> str:
    status, out, err = run_command(["mcp_server", *args], {"MCP_DATABASE_URL": db_url})
    assert status == 0, err
    return out.strip()


async def test_production_will_not_start_beside_demo_tokens_and_serves_once_they_are_gone(
    tmp_path, new_database_url
):
    db_url = new_database_url(tmp_path)
    run_cli("seed", db_url=db_url)  # a development database, then the company's people
    people = tmp_path / "people.csv"
    people.write_text("employee_id,name,manager_id,特休\nM001,陳美玲,,10\nE001,王小明,M001,7\n")
    run_cli("import", str(people), db_url=db_url)
    issued = run_cli("issue-token", "E001", db_url=db_url)
    port = free_port()
    env = {
        "MCP_DATABASE_URL": db_url,
        "MCP_PORT": str(port),
        "MCP_ENV": "production",
        "MCP_ELICITATION_STATE_KEY": "a" * 16 + "production-test-key-0123456789",
    }
    status, output = run_to_exit(["mcp_server"], env)
    assert status == 2
    assert output.strip() == (
        "configuration error: MCP_DATABASE_URL: MCP_ENV=production but the leave database "
        "still holds the demo tokens; remove them with `python -m mcp_server remove-demo-data`"
    )
    removed = run_cli("remove-demo-data", db_url=db_url)
    assert (
        removed == "removed 3 demo token(s) and 1 demo employee(s) (E002)"
    )  # E001, M001: imported
    base = f"http://127.0.0.1:{port}"
    with running(["mcp_server"], env, tmp_path / "mcp.log", f"{base}/readyz"):
        async with session(f"{base}/mcp", issued, "auto") as client:
            assert len(await find(client, "")) > 0
        async with httpx.AsyncClient() as http:
            demo = await http.post(
                f"{base}/mcp",
                json=INIT,
                headers={**MCP_HEADERS, "Authorization": "Bearer demo-token-employee"},
            )
    assert demo.status_code == 401


async def test_fifty_concurrent_conflicting_decisions_apply_exactly_once(mcp_url, mcp_db_url):
    async with session(mcp_url, "demo-token-other", "auto") as client:
        created = await client.call_tool(
            "create_leave",
            {
                "leave_type": "特休",
                "start_date": "2033-01-03",
                "end_date": "2033-01-04",
                "reason": "併發測試",
            },
        )
        leave_id = created.structured_content["leave_id"]
        await client.call_tool("update_leave_status", {"leave_id": leave_id, "status": "submitted"})
        balance_before = await client.call_tool("get_leave_balance", {})

    results = []
    async with session(mcp_url, "demo-token-manager", "auto") as client:

        async def decide(i: int) -> None:
            status = "approved" if i % 2 else "rejected"
            results.append(
                await client.call_tool(
                    "update_leave_status", {"leave_id": leave_id, "status": status}
                )
            )

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(decide, i)

    applied = [r for r in results if not r.is_error]
    assert len(results) == 50 and len(applied) == 1
    winner = applied[0].structured_content["to_status"]
    # a decision that reads the leave after the winner committed finds it decided: rejected
    # (wrong_step), or approved (use_cancel_tool, the one way on from there); on PostgreSQL
    # about one run in two has such a late one
    late = "use_cancel_tool" if winner == "approved" else "wrong_step"
    assert {error_code(r) for r in results if r.is_error} <= {"conflict", late}
    async with session(mcp_url, "demo-token-other", "auto") as client:
        now = (await find(client, leave_id))[0]
        balance_after = await client.call_tool("get_leave_balance", {})
    assert now["status"] == winner

    def annual(result) -> float:
        lines = result.structured_content["balances"]
        return next(b["remaining_days"] for b in lines if b["leave_type"] == "特休")

    expected_drop = 2 if winner == "approved" else 0
    assert annual(balance_before) - annual(balance_after) == expected_drop

    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database

    database = Database(mcp_db_url)
    try:
        trail = LeaveService(database).audit_trail(leave_id)
        books = assert_books_balance(database)  # and every other leave's, after the module's tests
    finally:
        database.dispose()
    decisions = [e for e in trail if e.from_status == "submitted"]
    assert [(e.to_status, e.outcome, e.actor_id) for e in decisions] == [
        (winner, "applied", "M001")
    ]
    refusals = Counter(error_code(r) for r in results if r.is_error)
    print(
        f"{len(results)} concurrent decisions over HTTP: {len(applied)} applied ({winner}), "
        f"refused {dict(refusals)}; 特休 {annual(balance_before)} → {annual(balance_after)}; "
        f"books balance over {books.leaves} leaves and {books.audit_entries} audit entries"
    )


@pytest.mark.parametrize("words", [1_000, 20_000])
async def test_a_huge_search_keyword_is_refused_fast_and_kept_out_of_the_log(
    tmp_path, new_database_url, words
):
    db_url = new_database_url(tmp_path)
    run_cli("seed", db_url=db_url)
    port = free_port()
    env = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port)}
    log = tmp_path / "mcp.log"
    keyword = " ".join(f"詞{n}" for n in range(words))
    with running(["mcp_server"], env, log, f"http://127.0.0.1:{port}/readyz"):
        logged_before = log.stat().st_size
        async with session(f"http://127.0.0.1:{port}/mcp", "demo-token-employee", "auto") as c:
            with anyio.fail_after(10):
                result = await c.call_tool("search_leaves", {"keyword": keyword})
    assert error_code(result) == "keyword_too_long"
    assert log.stat().st_size - logged_before < 2_000, log.read_text()[-2_000:]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_confirmation_its_client_abandons_is_audited(tmp_path, new_database_url, mode):
    """The client asks, is asked to confirm, and dies before answering: the server alone
    must still write the audit entry (once the answer can no longer be accepted)."""
    from mcp_server.leaves import LeaveService
    from mcp_server.storage import Database
    from tests.support import wait_until

    db_url = new_database_url(tmp_path)
    run_cli("seed", db_url=db_url)
    port = free_port()
    env = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port), "MCP_CONFIRMATION_TTL_SECONDS": "1"}
    url = f"http://127.0.0.1:{port}/mcp"
    asked = anyio.Event()

    async def ask_and_never_answer(_context, _params):
        asked.set()
        await anyio.sleep_forever()

    with running(["mcp_server"], env, tmp_path / "mcp.log", f"http://127.0.0.1:{port}/readyz"):
        async with session(url, "demo-token-employee", mode) as client:
            wedding = (await find(client, "婚禮"))[0]["leave_id"]
        async with anyio.create_task_group() as tasks:

            async def call_and_die() -> None:
                async with session(url, "demo-token-employee", mode, ask_and_never_answer) as c:
                    await c.call_tool("cancel_approved_leave", {"leave_id": wedding})

            tasks.start_soon(call_and_die)
            with anyio.fail_after(10):
                await asked.wait()
            tasks.cancel_scope.cancel()  # the client goes away mid-confirmation

        database = Database(db_url)
        try:

            def audited() -> list:
                return [
                    (e.tool, e.confirmation, e.outcome, e.from_status, e.to_status)
                    for e in LeaveService(database).audit_trail(wedding)
                    if e.confirmation is not None
                ]

            await anyio.to_thread.run_sync(
                lambda: wait_until(audited, timeout=15, what="an abandoned confirmation's audit")
            )
            entries = audited()
        finally:
            database.dispose()
    assert len(entries) == 1, entries
    tool, confirmation, outcome, before, after = entries[0]
    assert (tool, outcome, before, after) == (
        "cancel_approved_leave",
        "not_applied",
        "approved",
        "approved",
    )
    assert (
        confirmation == "abandoned"
        if mode == "auto"
        else confirmation in {"abandoned", "cancelled"}
    )
