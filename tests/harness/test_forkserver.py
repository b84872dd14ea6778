"""The fork server the suite starts its services and commands from: each child is a process of
its own, with the environment, streams and exit status `python -m` would give it."""

from __future__ import annotations

import json
import os
import signal

import pytest

from harness import forkserver
from ops.compose import REPO_ROOT

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="LEAVE_TEST_LAUNCH=exec")


def probe(*args: str, env: dict[str, str] | None = None, input: str = "") -> tuple[int, dict, str]:
    status, out, err = forkserver.run_to_exit(
        ["tests.harness.probe", *args], env if env is not None else {"PROBE": "1"}, input=input
    )
    return status, json.loads(out), err


def test_a_child_runs_the_module_as_main_with_its_own_arguments_streams_and_status():
    status, seen, err = probe("3", input="from standard input")
    assert status == 3
    assert seen["name"] == "__main__" and seen["argv"] == ["3"]
    assert seen["stdin"] == "from standard input"
    assert err == "to standard error\n"
    assert seen["cwd"] == str(REPO_ROOT)
    assert seen["pid"] != os.getpid()


def test_a_child_has_exactly_the_environment_it_is_given(monkeypatch):
    # patched after the fork server started: a child must not see it unless it is passed
    monkeypatch.setenv("PATCHED_IN_THE_TEST_PROCESS", "yes")
    _, seen, _ = probe(env={"PROBE": "given"})
    assert (seen["probe"], seen["patched"]) == ("given", None)
    _, seen, _ = probe(env={**os.environ, "PROBE": "given"})
    assert seen["patched"] == "yes"


def test_a_child_that_dies_of_a_signal_reports_it_as_popen_does():
    status, _, _ = probe("die")
    assert status == -signal.SIGTERM


def test_what_a_child_changes_in_a_module_the_server_imported_is_not_seen_by_the_next():
    first = probe()[1]
    second = probe()[1]
    assert first["mark_before"] is None and second["mark_before"] is None
    assert first["pid"] != second["pid"]
