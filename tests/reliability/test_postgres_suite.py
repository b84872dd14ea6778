"""The MCP server's and the loop store's tests, unchanged, on a real PostgreSQL server: every
test that takes its database from `new_database_url` gets a fresh one there (see
tests/conftest.py), the 50-way concurrency tests included."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.postgres import PostgresServer
from tests.support import REPO_ROOT

pytestmark = pytest.mark.reliability

SUITES = [
    "tests/mcp_server",
    "tests/loop/test_runs.py",
    "tests/loop/test_resume.py",
    "tests/loop/test_store_concurrency.py",
    "tests/loop/test_service.py",
]


@pytest.mark.timeout(1200)
def test_the_mcp_server_and_loop_store_suites_pass_on_postgresql(postgres: PostgresServer):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *SUITES,
            f"--database-url={postgres.admin_url}",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rP",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    output = done.stdout + done.stderr
    figures = [line for line in output.splitlines() if re.match(r"^\d+ concurrent", line)]
    summary = output.strip().splitlines()[-2:]
    print("\n".join([*figures, *summary]))
    assert done.returncode == 0, output[-20_000:]
    used = re.search(r"databases: (\d+) fresh postgresql databases used", output)
    passed = re.search(r"(\d+) passed", summary[-1])
    assert used and passed, summary
    # Most tests must really have run there, the concurrency ones among them.
    assert int(used.group(1)) >= 60, used.group(0)
    assert len(figures) >= 6, figures
