"""Bad bearer tokens stay cheap: size limits, a memory of refused tokens, a per-client budget."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
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
        database = {"MCP_DATABASE_URL": f"sqlite:///{next(tmp_path.glob('leave-*.db'))}"}
        issued, said = run_to_exit(["mcp_server", "issue-token", "E001"], database)
        assert issued == 0, said
        token, note = said.splitlines()
        headers = {"Authorization": f"Bearer {token}"}
        assert get_run(loop, headers).status_code == 404  # accepted: the run is just unknown
        assert run_to_exit(["mcp_server", "revoke-token", note.split()[1]], database)[0] == 0
        revoked = time.monotonic()
        wait_until(lambda: get_run(loop, headers).status_code == 401, timeout=15,
                   what="the loop refusing the revoked token")  # fmt: skip
        print(f"\nrevoked token refused by the loop {time.monotonic() - revoked:.1f} s later")
        assert time.monotonic() - revoked < 5


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
