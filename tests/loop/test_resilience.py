"""Dead and restarted dependencies: the loop keeps serving and says what went wrong."""

from __future__ import annotations

import httpx

from tests.support import (
    ServiceProcess,
    free_port,
    loop_service,
    model_simulator,
    run_command,
    seed_database,
)

from .helpers import EMPLOYEE, tool_steps


def run(loop: str, body: dict) -> dict:
    return httpx.post(f"{loop}/v1/runs", json=body, headers=EMPLOYEE, timeout=60).json()


def export(store_url: str) -> str:
    """What `python -m loop export` writes by default."""
    status, out, err = run_command(["loop", "export"], {"LOOP_STORE_URL": store_url})
    assert status == 0, err
    return out


def test_mcp_server_killed_and_restarted_mid_session(tmp_path):
    port = free_port()
    env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'leave.db'}", "MCP_PORT": str(port)}
    seed_database(env["MCP_DATABASE_URL"])
    mcp = f"http://127.0.0.1:{port}"
    server = ServiceProcess(["mcp_server"], env, tmp_path / "mcp-1.log")
    try:
        server.wait_ready(f"{mcp}/readyz")
        with (
            model_simulator(tmp_path, profile="instant") as sim,
            loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", tool_timeout_seconds="5") as (
                loop,
                store_url,
            ),
        ):
            first = run(loop, {"input": "查一下家庭旅遊的假單"})
            assert first["status"] == "completed"
            leave_id = first["steps"][1]["result"]["leaves"][0]["leave_id"]
            session = first["session_id"]

            server.stop()  # the MCP server dies mid-session
            down = run(loop, {"input": "剛剛那張也送出審核", "session_id": session})
            # A run whose tools were unreachable is not a success, whatever the model says.
            assert down["status"] == "failed", down
            assert down["reason"].startswith("tools_unavailable:"), down
            assert "無法確認" in down["answer"] and "查" in down["answer"]  # a write: unknown
            assert httpx.get(f"{loop}/readyz").json()["mcp"] != "ok"
            metrics = httpx.get(f"{loop}/metrics").text
            assert 'leave_loop_runs_total{status="failed"} 1.0' in metrics
            exported = export(store_url)
            assert first["id"] in exported and down["id"] not in exported

            server = ServiceProcess(["mcp_server"], env, tmp_path / "mcp-2.log")
            server.wait_ready(f"{mcp}/readyz")
            again = run(loop, {"input": "剛剛那張也送出審核", "session_id": session})
            assert again["status"] == "completed", again
            assert tool_steps(again) == [
                ("update_leave_status", {"leave_id": leave_id, "status": "submitted"})
            ]
            assert httpx.get(f"{loop}/readyz").json()["status"] == "ready"
    finally:
        server.stop()


def test_model_endpoint_down_fails_readiness_and_runs_fast(tmp_path):
    from tests.support import mcp_server

    dead_model = f"http://127.0.0.1:{free_port()}/v1"
    with (
        mcp_server(tmp_path) as mcp,
        loop_service(
            tmp_path,
            dead_model,
            f"{mcp}/mcp",
            model_max_retries="2",
            model_retry_backoff_seconds="0.05",
        ) as (loop, _),
    ):
        ready = httpx.get(f"{loop}/readyz")
        assert ready.status_code == 503 and ready.json()["model"] == "ConnectError"
        final = run(loop, {"input": "查一下家庭旅遊的假單"})
        assert final["status"] == "failed"
        assert "connection_error after 3 attempts" in final["reason"]
        assert final["steps"][0]["duration_ms"] < 5000
        metrics = httpx.get(f"{loop}/metrics").text
        assert 'leave_loop_model_retries_total{reason="connection_error"} 2.0' in metrics
