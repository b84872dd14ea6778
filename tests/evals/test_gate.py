"""The release gate both ways, through `python -m evals` as an operator runs it (the real loop
and MCP server as processes): the simulator's policy passes the built-in suite and a site's
file; models wrong on purpose fail it, and the report names each scenario and why, down to the
malformed argument; a regression against a baseline is named; the failing samples export as a
chat-format dataset."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scenarios import SCENARIOS
from tests.support import REPO_ROOT, run_to_exit, serving_in_thread

from .fake_models import wrong_model

SITE_EXAMPLE = REPO_ROOT / "evals" / "site.example.toml"


def gate(*args: str) -> tuple[int, str]:
    return run_to_exit(["evals", *args], {}, timeout=600)


def report(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "report.json").read_text())


@pytest.fixture(scope="module")
def simulator_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("simulator")
    status, said = gate("--scenarios", str(SITE_EXAMPLE), "--out", str(out))
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
    site = {"site.approve_conference", "site.sick_day_by_date", "site.keep_family_leave",
            "site.sick_balance", "site.new_hire_first_leave", "site.approve_new_hire"}  # fmt: skip
    assert set(rows) == {s.name for s in SCENARIOS} | site
    assert all(row["goal_rate"] == 1.0 and row["untrue_rate"] == 0.0 for row in rows.values())
    assert {rows[name]["source"] for name in site} == {"site.example.toml"}
    # a person only the file has, as an employee and as the report a manager decides for
    assert rows["site.new_hire_first_leave"]["role"] == "employee"
    assert rows["site.approve_new_hire"]["role"] == "manager"
    # the declines the person gave are not the model's mistakes
    assert rows["cancel_declined"]["refusals_per_sample"] == 0.0
    # every tool, and a manager's decisions as well as an employee's requests
    tools_roles = {(row["tool"], row["role"]) for row in rows.values()}
    for tool in ("search_leaves", "get_leave_balance", "create_leave", "cancel_approved_leave"):
        assert (tool, "employee") in tools_roles
    assert ("update_leave_status", "manager") in tools_roles
    md = (simulator_report / "report.md").read_text()
    assert "**Gate: passed.**" in md and "| create.over_a_weekend | create_leave |" in md
    assert f"goal reached {len(rows)}/{len(rows)} (100 %)" in md


def test_samples_are_counted_in_each_rate(tmp_path):
    status, said = gate("--scenarios", "balance.typo,create.next_monday.formal", "--samples", "3",
                        "--out", str(tmp_path))  # fmt: skip
    assert status == 0, said
    rows = report(tmp_path)["scenarios"]
    assert [(row["samples"], row["goals"]) for row in rows] == [(3, 3), (3, 3)]
    assert "| 3/3 (100 %) | 0/3 (0 %) |" in (tmp_path / "report.md").read_text()


def test_a_model_wrong_on_purpose_fails_the_gate_and_the_report_says_where(wrong, tmp_path):
    mode, url = wrong
    status, said = gate("--model-url", url, "--out", str(tmp_path))
    # 1 is a verdict, with its report; not a crash's status
    assert status == 1 and (tmp_path / "report.json").exists(), said
    got = report(tmp_path)
    findings = got["gate"]["findings"]
    rows = {row["scenario"]: row for row in got["scenarios"]}
    # it acted on nothing, or on a leave that does not exist: no goal that needs a change
    for name in ("submit_draft", "cancel_accepted", "multi_turn"):
        assert rows[name]["goal_rate"] == 0.0
        assert f"{name}: goal reached in 0/1 (0 %) (floor 100%)" in findings
    # and it said it had: every answer is untrue, even where nothing had to change
    assert "query: untrue in 1/1 (100 %) (at most 0%)" in findings
    assert "untrue" in (tmp_path / "report.md").read_text()
    refusals = [code for sample in got["samples"] for code in sample["refusals"]]
    if mode == "guesses":  # the server refused every made-up id
        assert refusals and set(refusals) == {"unknown_leave_id"}
        assert "submit_draft: refusals per sample 1.00 over 0 (of 1)" in findings
    else:
        assert refusals == []


def test_each_malformed_call_is_named_by_tool_argument_and_how(tmp_path):
    with serving_in_thread(wrong_model("malformed"), "a wrong model") as base:
        status, said = gate("--model-url", f"{base}/v1", "--scenarios", "submit_draft",
                            "--out", str(tmp_path))  # fmt: skip
    assert status == 1, said
    got = report(tmp_path)
    assert "submit_draft: malformed calls per sample 8.00 over 0 (of 1)" in got["gate"]["findings"]
    assert got["overall"]["malformed_by_kind"] == {
        "create_leave.end_date: bad date (not YYYY-MM-DD)": 1,
        "create_leave.leave_type: unknown enum value": 1,
        "create_leave.start_date: bad date (not YYYY-MM-DD)": 1,
        "delete_leave: no such tool": 1,
        "search_leaves.(arguments): unparseable JSON": 1,
        "search_leaves.keyword: wrong type (not a string)": 1,
        "search_leaves.status: unknown enum value": 1,
        "update_leave_status.status: missing required": 1,
    }
    md = (tmp_path / "report.md").read_text()
    assert "malformed create_leave.start_date: bad date (not YYYY-MM-DD) '下週一'" in md
    assert "malformed create_leave.leave_type: unknown enum value 'vacation day'" in md

    # the failing sample, as a dataset record: the conversation, the tools, what was wrong
    out = tmp_path / "failures.jsonl"
    status, said = run_to_exit(["evals", "export-failures", str(tmp_path / "report.json"),
                                "--out", str(out)], {})  # fmt: skip
    assert status == 0 and "1 failing sample(s) written" in said, said
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    roles = [m["role"] for m in record["messages"]]
    assert roles[:2] == ["system", "user"] and roles.count("tool") == 7
    assert all(m["weight"] == 0 for m in record["messages"] if m["role"] == "assistant")
    assert {t["function"]["name"] for t in record["tools"]} >= {"create_leave", "search_leaves"}
    failure = record["metadata"]["failure"]
    assert failure["goal_missed"] and len(failure["malformed"]) == 8
    assert record["metadata"]["expected"].startswith("submit the 家庭旅遊 draft")
    # and the calls a right run makes, with the sample's own id of the draft
    search, submit = record["metadata"]["right_calls"]
    assert search == {"name": "search_leaves", "arguments": {}}
    assert submit["name"] == "update_leave_status"
    assert submit["arguments"]["status"] == "submitted"
    assert re.fullmatch(r"LV-[0-9a-f]{6}", submit["arguments"]["leave_id"])


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
    site = tmp_path / "site.toml"
    one = '[[scenario]]\nname = "site.{name}"\nperson = "{person}"\nturn = [{{ text = "hi" }}]\n'
    leave = ('start = [{{ reason = "{reason}", owner = "{owner}", leave_type = "事假", '
             'start = "{day}", end = "{day}" }}]\n')  # fmt: skip
    nothing = "expect = { unchanged = true }\n"
    bad_sites = (
        (one.format(name="a", person="E009") + nothing, "person: unknown person 'E009'"),
        (one.format(name="a", person="E001") + 'expect = { tools = ["delete_leave"] }\n',
         "expect.tools: unknown tool 'delete_leave'"),
        (one.format(name="a", person="E001") + 'tokn = "x"\n' + nothing, "tokn: unknown field"),
        (one.format(name="a", person="E001") + leave.format(reason="r", owner="E001",
                                                            day="+2w0d") + nothing
         + one.format(name="b", person="E002") + leave.format(reason="r", owner="E002",
                                                              day="+2w0d") + nothing,
         "conflicts with scenario site.a's leave of the same reason"),
        (one.format(name="a", person="E001") + leave.format(reason="r", owner="E001",
                                                            day="+1w2d") + nothing,
         "overlaps the demo leave '牙齒矯正回診' of E001"),
        (one.format(name="a", person="E001") + leave.format(reason="r", owner="E001",
                                                            day="+0w1d") + nothing
         + one.format(name="b", person="E001") + leave.format(reason="s", owner="E001",
                                                              day="+0w1d") + nothing,
         "overlaps scenario site.a's leave 'r'"),
        (one.format(name="a", person="E001") + 'expect = { statuses = { "x" = "approved" } }\n',
         "no leave of reason 'x'"),
        ('[[person]]\nid = "E101"\nname = "x"\nmanager = "M009"\n'
         + one.format(name="a", person="E101") + nothing,
         "person 1 (E101): manager: 'M009' is no demo employee"),
        ('[[person]]\nid = "E001"\nname = "x"\n' + one.format(name="a", person="E001") + nothing,
         "person 1 (E001): id: taken already"),
    )  # fmt: skip
    for text, says in bad_sites:
        site.write_text(text)
        status, said = gate("--scenarios", str(site), "--out", str(tmp_path / "out"))
        assert status == 2 and says in said and len(said.strip().splitlines()) == 1, said
    for args, says in (
        (["--thresholds", str(broken)], "missing absolute.max_untrue_rate"),
        (["--scenarios", "no_such"], "unknown scenario(s) no_such"),
        (["--samples", "0"], "--samples must be 1 or more"),
        (["--model-url", "http://127.0.0.1:9/v1"], "lists no model"),
    ):
        status, said = gate(*args, "--out", str(tmp_path / "out"))
        assert status == 2 and says in said and len(said.strip().splitlines()) == 1, said
    assert not (tmp_path / "out").exists()


def test_a_scratch_stack_that_cannot_start_is_no_verdict_but_one_line_and_exit_2(tmp_path):
    # the loop refuses to start with no turns at all: nothing could be scored
    status, said = run_to_exit(
        ["evals", "--scenarios", "query", "--out", str(tmp_path)],
        {"LOOP_MAX_TURNS": "0"},
        timeout=120,
    )
    assert status == 2, said
    (line,) = [x for x in said.splitlines() if x.startswith("error: ")]
    assert line.startswith("error: the gate could not run: RuntimeError: process exited")
    assert not (tmp_path / "report.json").exists()
