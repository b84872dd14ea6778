"""The release gate both ways, through `python -m evals` as an operator runs it (the real loop
and MCP server as processes): the simulator's policy passes; models wrong on purpose fail it,
and the report names each scenario and why; a regression against a baseline is named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scenarios import SCENARIOS
from tests.support import run_to_exit, serving_in_thread

from .fake_models import wrong_model


def gate(*args: str) -> tuple[int, str]:
    return run_to_exit(["evals", *args], {}, timeout=600)


def report(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "report.json").read_text())


@pytest.fixture(scope="module")
def simulator_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("simulator")
    status, said = gate("--out", str(out))
    print(said)
    assert status == 0, said
    return out


@pytest.fixture(scope="module", params=["claims", "guesses"])
def wrong(request) -> Iterator[tuple[str, str]]:
    with serving_in_thread(wrong_model(request.param), "a wrong model") as base:
        yield request.param, f"{base}/v1"


def test_the_simulators_policy_passes_every_scenario(simulator_report):
    got = report(simulator_report)
    assert got["gate"] == {"passed": True, "findings": []}
    assert got["endpoint"]["served_by"] == "simulator"
    rows = {row["scenario"]: row for row in got["scenarios"]}
    assert set(rows) == {s.name for s in SCENARIOS}
    assert all(row["goal_rate"] == 1.0 and row["untrue_rate"] == 0.0 for row in rows.values())
    # the declines the person gave are not the model's mistakes
    assert rows["cancel_declined"]["refusals_per_sample"] == 0.0
    assert "**Gate: passed.**" in (simulator_report / "report.md").read_text()


def test_a_model_wrong_on_purpose_fails_the_gate_and_the_report_says_where(wrong, tmp_path):
    mode, url = wrong
    status, said = gate("--model-url", url, "--out", str(tmp_path))
    assert status == 1, said
    got = report(tmp_path)
    findings = got["gate"]["findings"]
    rows = {row["scenario"]: row for row in got["scenarios"]}
    # it acted on nothing, or on a leave that does not exist: no goal that needs a change
    for name in ("submit_draft", "cancel_accepted", "multi_turn"):
        assert rows[name]["goal_rate"] == 0.0
        assert f"{name}: goal reached in 0% of 1 (floor 100%)" in findings
    # and it said it had: every answer is untrue, even where nothing had to change
    assert "query: untrue in 100% of 1 (at most 0%)" in findings
    assert "untrue" in (tmp_path / "report.md").read_text()
    refusals = [code for sample in got["samples"] for code in sample["refusals"]]
    if mode == "guesses":  # the server refused every made-up id
        assert refusals and set(refusals) == {"unknown_leave_id"}
    else:
        assert refusals == []


def test_a_regression_against_the_baseline_is_named_by_how_much(simulator_report, tmp_path):
    with serving_in_thread(wrong_model("guesses"), "a wrong model") as base:
        status, said = gate("--model-url", f"{base}/v1", "--scenarios", "submit_draft,query",
                            "--baseline", str(simulator_report / "report.json"),
                            "--out", str(tmp_path))  # fmt: skip
    assert status == 1, said
    findings = report(tmp_path)["gate"]["findings"]
    assert "submit_draft: goal rate 1.00 → 0.00 (allowed 0.00)" in findings
    assert "query: refusals per sample 0.00 → 1.00 (allowed 0.50)" in findings


def test_what_the_gate_cannot_run_on_is_one_line(tmp_path):
    broken = tmp_path / "thresholds.toml"
    broken.write_text("[absolute]\nmin_goal_rate = 1.0\n")
    for args, says in (
        (["--thresholds", str(broken)], "missing absolute.max_untrue_rate"),
        (["--scenarios", "no_such"], "unknown scenario(s) no_such"),
        (["--samples", "0"], "--samples must be 1 or more"),
        (["--model-url", "http://127.0.0.1:9/v1"], "lists no model"),
    ):
        status, said = gate(*args, "--out", str(tmp_path / "out"))
        assert status == 2 and says in said and len(said.strip().splitlines()) == 1, said
    assert not (tmp_path / "out").exists()
