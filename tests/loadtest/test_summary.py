"""summary.json's one model (loadtest/summary.py): the writer's file is the model's, byte for
byte the file the writer before the model wrote; a summary written by every earlier version of
the writer still reads, and still gets costed; anything else is one line naming where."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loadtest.cost.__main__ import main as cost_main
from loadtest.prometheus import FIGURES
from loadtest.results import Slo, write_summary
from loadtest.summary import LoadInfo, LoadSummary, StepFigures, SummaryError
from tests.loadtest.summaries import FIXTURES, SLO, identified, write_run_folder
from tests.support import REPO_ROOT

BEFORE_THE_MODEL = FIXTURES / "f1d2d92.json"
# oldest first; the last wrote what every field of today's writer but the replicas
EARLIER = ["419942b", "25dee20", "cbd7e68", "64dd871", "6fc8601"]


def test_the_writer_writes_what_it_wrote_before_the_model(tmp_path):
    before = json.loads(BEFORE_THE_MODEL.read_text())
    write_run_folder(tmp_path)
    written = write_summary(
        tmp_path, Slo(**SLO), "off", identified(before), LoadInfo.model_validate(before["load"])
    )
    text = (tmp_path / "summary.json").read_text()
    # byte for byte, but for the figure added since (vLLM's prefix-cache hit rate)
    older = json.loads(text)
    for step in older["steps"]:
        del step["prometheus"]["prefix_cache_hit_rate"]
    for block in ("queries", "recording_rules"):
        del older["prometheus"][block]["prefix_cache_hit_rate"]
    assert json.dumps(older, indent=2, ensure_ascii=False) + "\n" == BEFORE_THE_MODEL.read_text()
    # and what a reader gets back is what was written
    assert LoadSummary.read(tmp_path / "summary.json") == written
    assert written.text() == text


@pytest.mark.parametrize("commit", [*EARLIER, "f1d2d92"])
def test_a_summary_of_every_earlier_writer_reads_and_writes_back_the_same(commit):
    path = FIXTURES / f"{commit}.json"
    summary = LoadSummary.read(path)
    assert summary.capacity_at_slo is not None and summary.capacity_at_slo.step == 0
    assert [step.slo_met for step in summary.steps] == [True, False]
    scenarios = summary.steps[0].agent.scenarios  # type: ignore[union-attr]
    assert {name: block.runs for name, block in scenarios.items()} == {
        "cancel_accepted": 5,
        "query": 20,
    }
    original = json.loads(path.read_text())
    if commit in ("419942b", "25dee20", "cbd7e68", "64dd871"):
        # a scenario was its run count then: read as a block of runs alone
        for step in original["steps"]:
            for block in (step["agent"], step.get("facade")):
                if block:
                    block["scenarios"] = {k: {"runs": n} for k, n in block["scenarios"].items()}
        assert summary.as_json() == original
    else:
        assert summary.text() == path.read_text()


def test_what_an_older_summary_left_out_reads_as_what_it_meant():
    first = LoadSummary.read(FIXTURES / "419942b.json")
    step = first.steps[0]
    assert (step.phase, step.facade, step.prometheus) == (None, None, None)
    assert step.agent is not None and step.agent.confirmations_per_run is None
    assert first.slo.facade_run_p95_ms is None
    assert first.capacity_at_slo is not None and first.capacity_at_slo.facade_runs_per_s == 0
    assert (first.backend, first.load, first.prometheus) == (None, None, None)
    # nothing a reader did not find is written back
    assert "facade_runs_per_s" not in first.as_json()["capacity_at_slo"]


@pytest.mark.parametrize("commit", EARLIER)
def test_the_cost_calculator_costs_a_summary_of_every_earlier_writer(tmp_path, commit, capsys):
    path = tmp_path / "summary.json"
    shutil.copy(FIXTURES / f"{commit}.json", path)
    status = cost_main([str(path), "--settings", str(REPO_ROOT / "loadtest" / "cost.example.toml")])
    out, err = capsys.readouterr()
    assert (status, err) == (0, ""), err
    banner = "SIMULATED BACKEND" if commit == "6fc8601" else "BACKEND NOT RECORDED"
    assert banner in out
    cost = json.loads((tmp_path / "cost.json").read_text())
    assert cost["summary"]["slo"] == json.loads(path.read_text())["slo"]


def test_the_step_figures_are_the_prometheus_figures():
    assert list(StepFigures.model_fields) == [*FIGURES, "notes"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s.pop("slo"), "not a summary.json of python -m loadtest: slo: Field required"),
        (
            lambda s: s["steps"][1].update(users="eight"),
            "steps.1.users: Input should be a valid integer, unable to parse string as an "
            "integer (got 'eight')",
        ),
        (lambda s: s["steps"][0].update(gpu=1), "steps.0.gpu: Extra inputs are not permitted"),
        (lambda s: s.update(backend={"kind": "tpu"}), "backend.kind: Input should be"),
    ],
    ids=["missing", "wrong type", "unknown key", "unknown backend"],
)
def test_anything_else_is_one_line_naming_where(tmp_path, change, said):
    summary = json.loads(BEFORE_THE_MODEL.read_text())
    change(summary)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    with pytest.raises(SummaryError) as error:
        LoadSummary.read(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and said in message, message
    assert "\n" not in message


def test_a_file_that_is_no_json_or_missing_is_one_line(tmp_path):
    path = tmp_path / "summary.json"
    with pytest.raises(SummaryError, match=r"^cannot read .*summary.json: No such file"):
        LoadSummary.read(path)
    path.write_text("{")
    with pytest.raises(SummaryError, match=r"summary.json is not JSON: "):
        LoadSummary.read(path)


def test_a_summary_read_back_is_plain_json(tmp_path):
    summary = LoadSummary.read(BEFORE_THE_MODEL)
    assert json.loads(json.dumps(summary.as_json())) == json.loads(BEFORE_THE_MODEL.read_text())
    assert isinstance(summary.slo.ttft_p99_ms, int)  # 200 stays 200, not 200.0
    assert Path(BEFORE_THE_MODEL).read_text().count('"ttft_p99_ms": 200,') == 1


def test_the_servers_figures_of_a_simulated_load_are_labelled_simulated():
    from devtools.sweep import step_table
    from loadtest.__main__ import _headline

    summary = LoadSummary.read(FIXTURES / "f1d2d92.json")
    figures = StepFigures(
        gpu_util_percent_mean=40.0, gpu_busy_mean=0.4, vllm_ttft_p95_ms=80.0,
        kv_cache_usage_max=0.1, notes=[],
    )  # fmt: skip
    steps = [step.model_copy(update={"prometheus": figures}) for step in summary.steps]
    simulated = summary.model_copy(update={"steps": steps})
    assert {"GPU util % (simulated)", "vLLM TTFT p95 ms (simulated)"} <= set(
        _headline(simulated)[0]
    )
    assert "vLLM TTFT p95 ms (simulated)" in step_table(simulated)[0]
    assert simulated.backend is not None
    real = simulated.model_copy(
        update={"backend": simulated.backend.model_copy(update={"simulated": False})}
    )
    assert {"GPU util %", "vLLM TTFT p95 ms"} <= set(_headline(real)[0])
    assert "(simulated)" not in step_table(real)[0]
