"""A production load test leaves people's data alone: `python -m loadtest` makes a manager and
an employee of its own through the MCP server's operator commands, acts as them, and removes
them with their leaves, audit entries and tokens when it ends (Ctrl-C too); a real person's
token is refused unless told explicitly. Real processes: the MCP server in production mode,
the simulator, the loop, `python -m loadtest` and its Locust, over real sockets."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadtest.mcp import McpClient
from loadtest.summary import LoadSummary
from tests.support import (
    REPO_ROOT,
    loop_service,
    mcp_server,
    model_simulator,
    run_command,
    wait_until,
)

PEOPLE = "employee_id,name,manager_id,特休,病假\nC100,林經理,,10,30\nC101,張員工,C100,10,30\n"


@dataclass
class Site:
    db_url: str
    db_path: Path
    mcp: str
    loop: str
    model: str
    person_token: str
    manager_token: str


def admin(db_url: str, *args: str) -> str:
    status, out, err = run_command(["mcp_server", *args], {"MCP_DATABASE_URL": db_url})
    assert status == 0, err
    return out.strip()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    """A production leave system with the company's people (no demo data, demo tokens
    refused), one of whom has a leave of their own."""
    workdir: Path = tmp_path_factory.mktemp("production")
    db_path = workdir / "leave.db"
    db_url = f"sqlite:///{db_path}"
    production = {"MCP_ENV": "production", "MCP_ELICITATION_STATE_KEY": secrets.token_hex(32)}
    status, _, err = run_command(["mcp_server", "seed"], {"MCP_DATABASE_URL": db_url, **production})
    assert status == 0, err
    (workdir / "people.csv").write_text(PEOPLE)
    admin(db_url, "import", str(workdir / "people.csv"))
    person, manager = admin(db_url, "issue-token", "C101"), admin(db_url, "issue-token", "C100")
    with (
        mcp_server(workdir, db_url, seed=False, **production) as mcp,
        model_simulator(workdir, profile="instant") as sim,
        loop_service(workdir, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        client = McpClient(f"{mcp}/mcp", person)
        try:
            client.call(
                "create_leave",
                {"leave_type": "特休", "start_date": "2041-03-04", "end_date": "2041-03-04",
                 "reason": "家族旅行"},
            )  # fmt: skip
        finally:
            client.close()
        yield Site(db_url, db_path, f"{mcp}/mcp", loop, f"{sim}/v1", person, manager)


def rows(site: Site, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(site.db_path) as db:
        return db.execute(query, args).fetchall()


def real_history(site: Site) -> tuple[list[tuple[Any, ...]], ...]:
    """Everything of the company's people a load test could touch."""
    return (
        rows(site, "SELECT * FROM leaves WHERE employee_id IN ('C100', 'C101') ORDER BY id"),
        rows(site, "SELECT * FROM audit_log WHERE actor_id IN ('C100', 'C101') ORDER BY id"),
        rows(site, "SELECT * FROM balances WHERE employee_id IN ('C100', 'C101')"),
        rows(site, "SELECT * FROM employees ORDER BY id"),
    )


def load_test_rows(site: Site) -> dict[str, int]:
    """What load-test employees have in the database now."""
    mine = "(SELECT id FROM employees WHERE source = 'loadtest')"
    return {
        "employees": rows(site, f"SELECT count(*) FROM {mine}")[0][0],
        "leaves": rows(site, f"SELECT count(*) FROM leaves WHERE employee_id IN {mine}")[0][0],
        "tokens": rows(site, f"SELECT count(*) FROM api_tokens WHERE employee_id IN {mine}")[0][0],
    }


def loadtest(site: Site, tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    """`python -m loadtest` on the site, in a session of its own (Ctrl-C reaches it and its
    Locust alike, as a terminal's does); its operator commands reach the site's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAD_", "MCP_"))}
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "loadtest", "--loop-url", site.loop, "--mcp-url", site.mcp),
            *("--model-url", site.model, "--prometheus-url", "off", "--shape", "constant"),
            *("--users", "2", "--results-dir", str(tmp_path / "results")),
            *("--slo-run-p95-ms", "60000", *flags),
        ],
        cwd=REPO_ROOT,
        env=env | {"MCP_DATABASE_URL": site.db_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_real_persons_token_is_refused_without_the_flag(site, tmp_path):
    before = real_history(site)
    load = loadtest(site, tmp_path, "--token", site.person_token, "--manager-token",
                    site.manager_token, "--duration-seconds", "2")  # fmt: skip
    out, err = load.communicate(timeout=60)
    assert load.returncode == 2, out + err
    assert err.strip() == (
        "load: --token / --manager-token is a person's own token: the load test would write "
        "its leaves into their history and audit log; leave them out (it makes employees of "
        "its own) or add --allow-real-employee"
    )
    assert real_history(site) == before and not (tmp_path / "results").exists()


def test_in_production_the_load_test_acts_as_employees_of_its_own_and_removes_them(site, tmp_path):
    before = real_history(site)
    assert load_test_rows(site) == {"employees": 0, "leaves": 0, "tokens": 0}
    load = loadtest(site, tmp_path, "--duration-seconds", "6")
    seen: dict[str, int] = {}

    def working() -> bool:
        seen.update(load_test_rows(site))
        return seen["leaves"] > 0 or load.poll() is not None

    # while it runs: two employees of its own, their two tokens, and leaves they made
    wait_until(working, timeout=60, what="the load test's employees at work")
    assert seen["employees"] == 2 and seen["tokens"] == 2 and seen["leaves"] > 0, seen
    out, err = load.communicate(timeout=120)
    assert load.returncode == 0, out[-3000:] + err[-3000:]
    assert "load: acting as loadtest-" in out and "removed 2 load-test employee(s)" in out
    # afterwards: none of them, nor their leaves, tokens or those leaves' audit entries
    assert load_test_rows(site) == {"employees": 0, "leaves": 0, "tokens": 0}
    assert rows(site, "SELECT count(*) FROM audit_log WHERE actor_id LIKE 'loadtest-%'") == [(0,)]
    assert rows(site, "SELECT count(*) FROM leaves WHERE employee_id LIKE 'loadtest-%'") == [(0,)]
    # the company's people: as they were, their leave and audit log untouched
    assert real_history(site) == before
    (path,) = (tmp_path / "results").glob("*/summary.json")
    (step,) = LoadSummary.read(path).steps
    assert step.errors == 0 and step.agent is not None and step.agent.runs > 0, step.error_examples


def test_ctrl_c_still_removes_the_load_tests_employees(site, tmp_path):
    before = real_history(site)
    load = loadtest(site, tmp_path, "--duration-seconds", "120")
    wait_until(
        lambda: load_test_rows(site)["leaves"] > 0 or load.poll() is not None,
        timeout=60,
        what="the load test's employees at work",
    )
    assert load.poll() is None, load.communicate()
    os.killpg(load.pid, signal.SIGINT)  # a Ctrl-C in its terminal
    out, err = load.communicate(timeout=90)
    assert "removed 2 load-test employee(s)" in out, out[-3000:] + err[-3000:]
    assert load_test_rows(site) == {"employees": 0, "leaves": 0, "tokens": 0}
    assert real_history(site) == before


def test_leftovers_are_found_by_their_marker_and_removed(site):
    """A run that could not clean up (killed) is cleaned up afterwards by the operator."""
    made = [json.loads(admin(site.db_url, "add-load-test-employees")) for _ in range(2)]
    first, second = (m["marker"] for m in made)
    assert load_test_rows(site)["employees"] == 4
    said = admin(site.db_url, "remove-load-test-employees", first)
    assert said == (
        f"removed 2 load-test employee(s) ({first}-e, {first}-m) with 0 leave(s) and 2 token(s)"
    )
    said = admin(site.db_url, "remove-load-test-employees")  # every run's leftovers
    assert said.startswith(f"removed 2 load-test employee(s) ({second}-e, {second}-m)")
    assert load_test_rows(site) == {"employees": 0, "leaves": 0, "tokens": 0}
    assert rows(site, "SELECT count(*) FROM employees WHERE id IN ('C100', 'C101')") == [(2,)]
    status, _, err = run_command(
        ["mcp_server", "remove-load-test-employees", "C101"], {"MCP_DATABASE_URL": site.db_url}
    )
    assert status == 2 and "'C101' is no load-test marker" in err
    assert rows(site, "SELECT count(*) FROM employees WHERE id IN ('C100', 'C101')") == [(2,)]


def demo_history(db_path: Path) -> tuple[list[tuple[Any, ...]], ...]:
    with sqlite3.connect(db_path) as db:
        return tuple(
            db.execute(query).fetchall()
            for query in (
                "SELECT * FROM leaves WHERE employee_id IN ('E001', 'E002', 'M001') ORDER BY id",
                "SELECT * FROM audit_log WHERE actor_id IN ('E001', 'E002', 'M001') ORDER BY id",
                "SELECT * FROM balances WHERE employee_id IN ('E001', 'E002', 'M001')",
            )
        )


def test_the_demos_sweep_leaves_the_demo_employees_leaves_as_the_demo_made_them(tmp_path):
    """The demo's sweep runs the load test on employees of its own (devtools/sweep.py); the
    load test on the demo tokens, as the sweep ran it before, filled the demo employee's
    history with 「壓測…」 leaves and audit entries."""
    from devtools.sweep import sweep_command

    db_path = tmp_path / "leave.db"
    db_url = f"sqlite:///{db_path}"
    with (
        mcp_server(tmp_path, db_url) as mcp,  # the demo's data, as `make demo` seeds it
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        site = Site(db_url, db_path, f"{mcp}/mcp", loop, f"{sim}/v1", "", "")
        seeded = demo_history(db_path)
        args, env = sweep_command({"MCP_DATABASE_URL": db_url, "LOOP_PORT": "1"})
        assert args == ["loadtest", "--employees", "own"] and env == {"MCP_DATABASE_URL": db_url}
        load = loadtest(site, tmp_path / "own", "--employees", "own", "--duration-seconds", "4")
        out, err = load.communicate(timeout=120)
        assert load.returncode == 0, out[-3000:] + err[-3000:]
        assert "removed 2 load-test employee(s)" in out
        assert demo_history(db_path) == seeded
        assert load_test_rows(site) == {"employees": 0, "leaves": 0, "tokens": 0}
        # what the sweep did before: the demo tokens, and the demo employee's history grows
        load = loadtest(site, tmp_path / "demo", "--duration-seconds", "4")
        out, err = load.communicate(timeout=120)
        assert load.returncode == 0, out[-3000:] + err[-3000:]
        assert "acting as" not in out  # auto: the demo tokens, which development takes
        with sqlite3.connect(db_path) as db:
            (stress,) = db.execute(
                "SELECT count(*) FROM leaves WHERE employee_id = 'E001' AND reason LIKE '壓測%'"
            ).fetchone()
        assert stress > 0 and demo_history(db_path) != seeded


def test_told_explicitly_the_load_test_acts_as_the_person_whose_token_it_was_given(site, tmp_path):
    """--allow-real-employee: the person's own token, as asked (their history then grows)."""

    def theirs() -> int:
        return rows(site, "SELECT count(*) FROM leaves WHERE employee_id = 'C101'")[0][0]

    before = theirs()
    load = loadtest(site, tmp_path, "--token", site.person_token, "--manager-token",
                    site.manager_token, "--allow-real-employee", "--duration-seconds", "3")  # fmt: skip
    out, err = load.communicate(timeout=120)
    assert load.returncode == 0, out[-3000:] + err[-3000:]
    assert "acting as" not in out and load_test_rows(site)["employees"] == 0
    assert theirs() > before
