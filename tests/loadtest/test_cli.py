"""`python -m loadtest`: a bad setting is one line naming it and exit status 2, before any load."""

from __future__ import annotations

import os

import pytest

from loadtest.__main__ import main


@pytest.fixture(autouse=True)
def no_load_environment(monkeypatch):
    for name in [n for n in os.environ if n.startswith("LOAD_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--user-classes", "agent,robot"],
            "configuration error: --user-classes / LOAD_USER_CLASSES: Value error, expected "
            "some of agent, model, facade, got 'agent,robot'",
        ),
        (
            ["--shape", "spike", "--duration-seconds", "15"],
            "configuration error: Value error, the spike ends at 20 s (spike_start_seconds + "
            "spike_seconds), not before duration_seconds (15 s): no baseline after it to "
            "recover in",
        ),
        (
            ["--duration-seconds", "30"],
            "configuration error: --duration-seconds / LOAD_DURATION_SECONDS: the length of the "
            "constant and spike shapes; the steps shape (the default) lasts steps × "
            "step_seconds: add --shape constant",
        ),
        (
            ["--spike-factor", "1"],
            "configuration error: --spike-factor / LOAD_SPIKE_FACTOR: Input should be greater "
            "than 1",
        ),
    ],
)
def test_a_bad_setting_is_one_line_and_status_2(argv, line, tmp_path, capsys):
    assert main([*argv, "--results-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []  # nothing was started
