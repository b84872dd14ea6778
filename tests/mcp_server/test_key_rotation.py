"""MCP_ELICITATION_STATE_KEY rotates without losing the confirmations in flight: a question
sealed under the old key is still answered by a server that seals with a new key and keeps the
old one to open; once the old key is dropped it is refused, never mistaken for an answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult

from tests.support import ServiceProcess, free_port, seed_database

from .helpers import find
from .http_session import session

OLD = "old-confirmation-key-" + "0" * 24
NEW = "new-confirmation-key-" + "1" * 24
WEDDING = "回台南參加表妹婚禮"  # E001's approved leave in the demo data


class RestartBeforeAnswering:
    """Answers "yes" to the confirmation, but only after the server that asked has been
    replaced by one started with `keys`: the answer, and the state sealed with the question,
    reach the new server."""

    def __init__(self, server: dict[str, ServiceProcess], start: Any, keys: str) -> None:
        self.server, self.start, self.keys = server, start, keys
        self.asked = 0

    async def __call__(self, _context: Any, _params: Any) -> ElicitResult:
        self.asked += 1
        self.server["now"].stop()
        self.server["now"] = self.start(self.keys)
        return ElicitResult(action="accept", content={"confirm": True})


def servers(tmp_path: Path) -> tuple[str, Any]:
    db_url = f"sqlite:///{tmp_path / 'leave.db'}"
    seed_database(db_url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def start(keys: str) -> ServiceProcess:
        env = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port),
               "MCP_ELICITATION_STATE_KEY": keys}  # fmt: skip
        process = ServiceProcess(["mcp_server"], env, tmp_path / f"mcp-{keys[:3]}.log")
        process.wait_ready(f"{base}/readyz")
        return process

    return base, start


async def cancel_across_a_restart(tmp_path: Path, after: str) -> tuple[Any, list[dict], int]:
    base, start = servers(tmp_path)
    server = {"now": start(OLD)}
    answer = RestartBeforeAnswering(server, start, after)
    try:
        async with session(f"{base}/mcp", "demo-token-employee", "auto", answer) as client:
            wedding = (await find(client, WEDDING))[0]
            try:
                result: Any = await client.call_tool(
                    "cancel_approved_leave", {"leave_id": wedding["leave_id"]}
                )
            except MCPError as error:
                result = error
            now = await find(client, WEDDING)
    finally:
        server["now"].stop()
    return result, now, answer.asked


async def test_a_confirmation_asked_under_the_old_key_is_answered_after_the_rotation(tmp_path):
    result, now, asked = await cancel_across_a_restart(tmp_path, f"{NEW},{OLD}")
    assert asked == 1
    assert not result.is_error, result.content
    assert now[0]["status"] == "cancelled"


async def test_once_the_old_key_is_dropped_its_confirmations_are_refused_and_nothing_changes(
    tmp_path,
):
    result, now, asked = await cancel_across_a_restart(tmp_path, NEW)
    assert asked == 1
    assert isinstance(result, MCPError) and "Invalid or expired requestState" in str(result)
    assert now[0]["status"] == "approved"
