"""Bad bearer tokens stay cheap: size limits, a memory of refused tokens, a per-client budget."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tests.support import loop_service, mcp_server, model_simulator, run_to_exit, wait_until

from .helpers import EMPLOYEE

FAILURE_LIMIT = 4


class Services(NamedTuple):
    loop: str
    mcp: str


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[Services]:
    workdir = tmp_path_factory.mktemp("badtokens")
    with (
        mcp_server(workdir) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(workdir, f"{sim}/v1", f"{mcp}/mcp", auth_failure_limit=str(FAILURE_LIMIT)) as (
            loop,
            _,
        ),
    ):
        yield Services(loop, mcp)


def mcp_refusals(services: Services) -> float:
    """How many requests the MCP server refused with 401 for an invalid token."""
    text = httpx.get(f"{services.mcp}/metrics").text
    found = re.search(r'^leave_mcp_auth_failures_total\{reason="invalid"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def get_run(
    base: str, headers: dict[str, str], client: httpx.Client | None = None
) -> httpx.Response:
    url = f"{base}/v1/runs/run_unknown"
    return client.get(url, headers=headers) if client else httpx.get(url, headers=headers)


def test_oversized_headers_are_431_and_never_reach_the_mcp_server(services):
    before = mcp_refusals(services)
    huge = {"Authorization": "Bearer " + "a" * 65_536}
    response = get_run(services.loop, huge)
    assert response.status_code == 431, response.text
    assert "16384" in response.json()["detail"]
    assert mcp_refusals(services) == before
    assert get_run(services.loop, EMPLOYEE).status_code == 404  # normal headers still pass


def test_a_refused_token_is_remembered_and_a_client_that_keeps_failing_gets_429(services):
    assert get_run(services.loop, EMPLOYEE).status_code == 404  # a known-good token
    before = mcp_refusals(services)
    bad = {"Authorization": "Bearer garbage-token-1"}
    assert get_run(services.loop, bad).status_code == 401
    asked_once = mcp_refusals(services)
    assert asked_once > before
    for _ in range(FAILURE_LIMIT - 1):
        assert get_run(services.loop, bad).status_code == 401
    assert mcp_refusals(services) == asked_once  # answered from memory, no MCP connection

    limited = get_run(services.loop, {"Authorization": "Bearer garbage-token-2"})
    assert limited.status_code == 429, limited.text
    assert 0 < int(limited.headers["retry-after"]) <= 60
    assert mcp_refusals(services) == asked_once
    # The budget is per client: the known-good token still works, another address still may try.
    assert get_run(services.loop, EMPLOYEE).status_code == 404
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as elsewhere:
        assert get_run(services.loop, bad, elsewhere).status_code == 401


def issued_token(workdir: Path) -> tuple[dict[str, str], Callable[[], None]]:
    """A token `issue-token` made for E001 in the MCP server's database under `workdir`, as
    request headers, and a way to revoke it."""
    database = {"MCP_DATABASE_URL": f"sqlite:///{next(workdir.glob('leave-*.db'))}"}
    issued, said = run_to_exit(["mcp_server", "issue-token", "E001"], database)
    assert issued == 0, said
    token, note = said.splitlines()

    def revoke() -> None:
        assert run_to_exit(["mcp_server", "revoke-token", note.split()[1]], database)[0] == 0

    return {"Authorization": f"Bearer {token}"}, revoke


def test_a_token_revoked_while_the_loop_holds_its_connection_is_refused_within_the_cache_time(
    tmp_path,
):
    """The loop keeps an MCP connection per token and trusts it for
    LOOP_REJECTED_TOKEN_CACHE_SECONDS; after that it asks the server again."""
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", rejected_token_cache_seconds="1") as (
            loop,
            _,
        ),
    ):
        headers, revoke = issued_token(tmp_path)
        assert get_run(loop, headers).status_code == 404  # accepted: the run is just unknown
        revoke()
        revoked = time.monotonic()
        wait_until(lambda: get_run(loop, headers).status_code == 401, timeout=15,
                   what="the loop refusing the revoked token")  # fmt: skip
        print(f"\nrevoked token refused by the loop {time.monotonic() - revoked:.1f} s later")
        assert time.monotonic() - revoked < 5


def test_a_run_whose_token_is_revoked_while_the_loop_trusts_it_fails_saying_sign_in_again(
    tmp_path,
):
    """Within the trust period the loop lets the revoked token in, but the MCP server refuses
    the run's tool call: the run fails with a reason that says so (never `completed`), tells the
    person to sign in again, and the loop forgets the token."""
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", rejected_token_cache_seconds="300") as (
            loop,
            _,
        ),
    ):
        headers, revoke = issued_token(tmp_path)
        ask = {"input": "查一下我的假單"}
        first = httpx.post(f"{loop}/v1/runs", json=ask, headers=headers, timeout=60).json()
        assert first["status"] == "completed", first
        revoke()
        run = httpx.post(f"{loop}/v1/runs", json=ask, headers=headers, timeout=60)
        asked = mcp_refusals(Services(loop, mcp))
        after = get_run(loop, headers)
        assert mcp_refusals(Services(loop, mcp)) == asked  # forgotten: refused unasked
    assert run.status_code == 200, run.text
    final = run.json()
    assert final["status"] == "failed", final
    assert final["reason"].startswith("sign_in_refused: "), final
    assert "重新登入" in final["answer"]
    assert [s["error"] for s in final["steps"] if s["type"] == "tool"] == ["sign_in_refused"]
    assert after.status_code == 401, after.text


def test_a_token_still_taken_is_let_in_again_after_the_loop_asks_the_server(tmp_path):
    """With no trust period every request re-asks the MCP server over the open connection."""
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp", rejected_token_cache_seconds="0") as (
            loop,
            _,
        ),
    ):
        statuses = [get_run(loop, EMPLOYEE).status_code for _ in range(3)]
    assert statuses == [404, 404, 404]  # accepted each time; the run is just unknown
