"""A run whose answer claims a change none of its tool calls made is flagged on its record,
counted on /metrics and kept out of the training export; one that did what it says is not.
The claim words are the release gate's (common.claims)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from common.contract import StepKind, StepOutcome
from common.runs_protocol import Step
from loop.claim_check import changes_made, claims_unverified
from tests.evals.fake_models import wrong_model
from tests.support import (
    loop_service,
    mcp_server,
    model_simulator,
    run_command,
    serving_in_thread,
)

from .helpers import EMPLOYEE

LIAR_REQUEST = "幫我把家庭旅遊那張送出審核"
HONEST_REQUEST = "把我那張家庭旅遊的特休送出審核"


def tool(name: str, arguments: dict, result: dict | None = None, error=None) -> Step:
    return Step(StepKind.TOOL, name, "2026-12-07T09:00:00", arguments=arguments,
                result=result, error=error)  # fmt: skip


def test_a_claim_is_backed_only_by_a_successful_write_of_that_status():
    submitted = tool("update_leave_status", {"leave_id": "LV-1", "status": "submitted"},
                     {"to_status": "submitted"})  # fmt: skip
    refused = tool("update_leave_status", {"leave_id": "LV-1", "status": "submitted"},
                   {"error": {"code": "not_found"}}, StepOutcome.TOOL_ERROR)  # fmt: skip
    created = tool("create_leave", {"leave_type": "特休"}, {"status": "draft"})
    cancelled = tool("cancel_approved_leave", {"leave_id": "LV-2"})  # a result without status
    searched = tool("search_leaves", {"keyword": "LV-1"}, {"leaves": [{"status": "submitted"}]})
    assert changes_made([submitted, created, cancelled, searched]) == {
        "submitted",
        "draft",
        "cancelled",
    }
    said = "已將 LV-1 送出審核。"
    assert claims_unverified(said, [submitted]) == []
    # a refused write backs nothing, nor does a search that found the status
    assert claims_unverified(said, [refused, searched]) == ["submitted"]
    assert claims_unverified("已將 LV-1 送出審核，也已取消 LV-2。", [submitted]) == ["cancelled"]
    # a status read out in a listing claims nothing; no answer, nothing to flag
    assert claims_unverified("LV-1，已核准，三天。", []) == []
    assert claims_unverified(None, [refused]) == []


def _metric(loop: str, claim: str) -> float:
    text = httpx.get(f"{loop}/metrics").text
    line = f'leave_loop_claims_unverified_total{{claim="{claim}"}} '
    (value,) = [row.removeprefix(line) for row in text.splitlines() if row.startswith(line)]
    return float(value)


def _export(store_url: str, *flags: str) -> list[dict]:
    status, out, err = run_command(
        ["loop", "export", "--status", "all", *flags], {"LOOP_STORE_URL": store_url}
    )
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("model", ["liar", "simulator"])
def test_the_loop_flags_counts_and_leaves_out_an_answer_claiming_what_it_did_not_do(
    tmp_path: Path, model: str
):
    with (
        mcp_server(tmp_path) as mcp,
        serving_in_thread(wrong_model("claims"), "a model that claims") as liar,
        model_simulator(tmp_path, profile="instant") as simulator,
        loop_service(tmp_path, f"{liar if model == 'liar' else simulator}/v1", f"{mcp}/mcp")
        as (loop, store),
    ):  # fmt: skip
        request = LIAR_REQUEST if model == "liar" else HONEST_REQUEST
        done = httpx.post(f"{loop}/v1/runs", json={"input": request}, headers=EMPLOYEE,
                          timeout=60).json()  # fmt: skip
        run = httpx.get(f"{loop}/v1/runs/{done['id']}", headers=EMPLOYEE).json()
        assert run["status"] == "completed", run
        if model == "liar":
            # 「已將假單送出審核，也已取消那張假」 with no call at all: both claims unbacked
            assert run["claims_unverified"] == ["cancelled", "submitted"]
            assert (_metric(loop, "submitted"), _metric(loop, "cancelled")) == (1, 1)
        else:
            # the simulator searched, then submitted: what it says is what it did
            assert "update_leave_status" in [s["name"] for s in run["steps"]]
            assert "送出" in run["answer"] and run["claims_unverified"] == []
            assert _metric(loop, "submitted") == 0
        assert _metric(loop, "approved") == 0  # every claim exported from the start
    kept = _export(store)
    every = _export(store, "--include-flagged")
    assert len(every) == 1 and every[0]["metadata"]["claims_unverified"] == run["claims_unverified"]
    assert len(kept) == (0 if model == "liar" else 1)
