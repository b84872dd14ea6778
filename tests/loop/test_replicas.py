"""Two loop replicas on one run store, with no client affinity in front of them: a request
about a run that one replica holds (a confirmation's answer, a cancel, a chat front end's yes)
reaches it whichever replica receives it (LOOP_PEER_URL). Real processes over sockets: the
MCP server, the simulator and two loops."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.support import free_port, loop_service, mcp_server, model_simulator, running, wait_until

from .helpers import EMPLOYEE, OTHER, leave_status, stream_until

WEDDING = "取消我表妹婚禮那張假"
AGENT = "leave-copilot-agent"


@dataclass
class Replicas:
    holder: str  # where each run starts
    other: str  # where the person's next request lands
    store_url: str
    workdir: Path
    mcp: str
    model: str
    mcp_db_url: str  # leave_status reads it


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> Iterator[Replicas]:
    workdir = tmp_path_factory.mktemp("replicas")
    store = f"sqlite:///{workdir / 'loop.db'}"
    mcp_db = f"sqlite:///{workdir / 'leave.db'}"
    with mcp_server(workdir, mcp_db) as mcp, model_simulator(workdir, profile="instant") as sim:

        def replica() -> AbstractContextManager[tuple[str, str]]:
            return loop_service(
                workdir, f"{sim}/v1", f"{mcp}/mcp", store, peer_url="self",
                confirmation_timeout_seconds="60",
            )  # fmt: skip

        with replica() as (first, _), replica() as (second, _):
            yield Replicas(first, second, store, workdir, f"{mcp}/mcp", f"{sim}/v1", mcp_db)


def waiting_run(
    base: str, text: str = WEDDING, headers: dict[str, str] = EMPLOYEE
) -> tuple[str, str]:
    """(run id, confirmation id) of a run on `base` that asks before cancelling an approved
    leave (the wedding's by default) and waits for the answer."""
    events = stream_until(base, {"input": text}, "confirmation.requested", headers)
    return events[0].id, events[-1].confirmation_id


def finished(base: str, run_id: str) -> dict:
    seen: list[dict] = []

    def done() -> bool:
        seen.append(httpx.get(f"{base}/v1/runs/{run_id}", headers=EMPLOYEE).json())
        return seen[-1]["status"] != "running"

    wait_until(done, timeout=30, what=f"{run_id} to finish")
    return seen[-1]


def wedding_leave(replicas: Replicas) -> str:
    found = httpx.post(
        f"{replicas.holder}/v1/runs", json={"input": "查一下我表妹婚禮的假單"}, headers=EMPLOYEE
    ).json()
    return found["steps"][1]["result"]["leaves"][0]["leave_id"]


def test_an_answer_sent_to_the_other_replica_reaches_the_run(replicas):
    leave_id = wedding_leave(replicas)
    run_id, confirmation_id = waiting_run(replicas.holder)
    # the other replica shows the question (a page reloaded there can answer it)
    shown = httpx.get(f"{replicas.other}/v1/runs/{run_id}", headers=EMPLOYEE).json()
    assert [c["confirmation_id"] for c in shown["confirmations"]] == [confirmation_id]
    path = f"{replicas.other}/v1/runs/{run_id}/confirmations/{confirmation_id}"
    # the run is the employee's: another person's token finds nothing there either
    assert httpx.post(path, json={"action": "accept"}, headers=OTHER).status_code == 404
    # content the question's schema refuses: the holder's 422, and the question stays open
    bad = httpx.post(
        path, json={"action": "accept", "content": {"confirm": "maybe"}}, headers=EMPLOYEE
    )
    assert bad.status_code == 422 and "confirm" in bad.text, bad.text
    answered = httpx.post(path, json={"action": "decline"}, headers=EMPLOYEE)
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"status": "answered", "action": "decline"}
    run = finished(replicas.other, run_id)
    assert run["status"] == "completed" and "維持已核准" in run["answer"], run
    assert leave_status(replicas, leave_id) == "approved"


def test_a_cancel_sent_to_the_other_replica_stops_the_run(replicas):
    run_id, _ = waiting_run(replicas.holder)
    cancelled = httpx.post(f"{replicas.other}/v1/runs/{run_id}/cancel", headers=EMPLOYEE)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["id"] == run_id and cancelled.json()["status"] == "cancelled"
    assert finished(replicas.holder, run_id)["status"] == "cancelled"


def test_a_chat_front_ends_yes_at_the_other_replica_cancels_the_leave(replicas):
    leave_id = wedding_leave(replicas)
    asked_for = [{"role": "user", "content": WEDDING}]
    first = openai.OpenAI(base_url=f"{replicas.holder}/v1", api_key="demo-token-employee")
    question = first.chat.completions.create(model=AGENT, messages=asked_for)
    asked = question.choices[0].message.content or ""
    assert leave_id in asked and "確認代號" in asked, asked
    # the front end's next request lands on the other replica, streamed
    other = openai.OpenAI(base_url=f"{replicas.other}/v1", api_key="demo-token-employee")
    stream = other.chat.completions.create(
        model=AGENT,
        messages=[
            *asked_for,
            {"role": "assistant", "content": asked},
            {"role": "user", "content": "確認"},
        ],
        stream=True,
    )
    said = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert said.startswith(f"已取消假單 {leave_id}"), said
    assert leave_status(replicas, leave_id) == "cancelled"


def test_a_holder_that_stopped_answering_is_a_503_to_try_again(replicas):
    """Killed, a loop keeps its lease until the lease runs out: the other replica cannot reach
    it and says to try again shortly (it takes the run over once the lease has lapsed)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = {
        "LOOP_PORT": str(port),
        "LOOP_MODEL_BASE_URL": replicas.model,
        "LOOP_MCP_URL": replicas.mcp,
        "LOOP_STORE_URL": replicas.store_url,
        "LOOP_PEER_URL": base,
    }
    with running(["loop"], settings, replicas.workdir / "killed.log", f"{base}/healthz") as doomed:
        run_id, confirmation_id = waiting_run(base, "取消我畢業典禮那張假", OTHER)
        doomed.process.kill()
        doomed.process.wait(10)
    path = f"{replicas.other}/v1/runs/{run_id}/confirmations/{confirmation_id}"
    refused = httpx.post(path, json={"action": "accept"}, headers=OTHER)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
    assert "did not answer" in refused.json()["detail"]
    # nothing was answered: the run still waits, for whichever loop takes it over; reading
    # it gives what the store holds
    run = httpx.get(f"{replicas.other}/v1/runs/{run_id}", headers=OTHER)
    assert run.status_code == 200 and run.json()["status"] == "running", run.text


def test_auto_is_an_address_other_hosts_reach_and_none_stops_the_start(monkeypatch):
    from common.entrypoint import StartupError
    from loop.settings import LoopSettings

    monkeypatch.setenv("LOOP_MODEL_API_KEY", "x")
    settings = LoopSettings(_env_file=None, peer_url="auto", port=8123)
    here = socket.gethostbyname(socket.gethostname())
    if not ipaddress.ip_address(here).is_loopback:
        assert settings.peer_address() == f"http://{here}:8123"
    # a runtime that maps the host's name to 127.0.0.1 (podman does): the route's interface
    monkeypatch.setattr(socket, "gethostbyname", lambda _name: "127.0.0.1")
    routed = settings.peer_address()
    assert routed is not None and routed.endswith(":8123")
    host = routed.removeprefix("http://").removesuffix(":8123")
    assert not ipaddress.ip_address(host).is_loopback, routed
    assert LoopSettings(_env_file=None, peer_url="http://10.0.3.7:8080").peer_address() == (
        "http://10.0.3.7:8080"
    )
    assert LoopSettings(_env_file=None).peer_address() is None
    # and with no route either: a clear configuration error, not a traceback

    def unroutable(*_args: object) -> None:
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "connect", unroutable)
    with pytest.raises(StartupError, match=r"LOOP_PEER_URL: auto: .*Network is unreachable"):
        settings.peer_address()


@pytest.mark.parametrize("url", ["ftp://loop-1", "http://loop-1:8080/v1", "loop-1:8080", "auto "])
def test_a_peer_url_that_is_no_base_url_is_refused(monkeypatch, url):
    from pydantic import ValidationError

    from loop.settings import LoopSettings

    monkeypatch.setenv("LOOP_MODEL_API_KEY", "x")
    with pytest.raises(ValidationError, match="peer_url"):
        LoopSettings(_env_file=None, peer_url=url)
