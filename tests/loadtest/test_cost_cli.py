"""`python -m loadtest.cost`: settings layers and presets, a real summary.json in, the four
result files out, and every bad input as one line naming the setting, exit status 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.cost import CostSettings
from loadtest.cost.__main__ import main
from loadtest.cost.inputs import newest_summary
from loadtest.cost.presets import (
    API_PRESETS,
    DEFAULT_API_PRESET,
    DEFAULT_GPU_PRESET,
    ENGINEER_USD_PER_HOUR,
    GPU_PRESETS,
)
from loadtest.cost.settings import SettingError, load
from loadtest.results import Slo, summarise
from loadtest.summary import CapacityReading, LoadSummary
from tests.loadtest.records import agent_record
from tests.support import REPO_ROOT

EXAMPLE = REPO_ROOT / "loadtest" / "cost.example.toml"


@pytest.fixture(autouse=True)
def no_cost_environment(monkeypatch):
    """The calculator reads COST_* variables; the test runner's own must not leak in."""
    for name in list(os.environ):
        if name.startswith("COST_") or name == "LOAD_RESULTS_DIR":
            monkeypatch.delenv(name)


def write_summary(folder: Path) -> Path:
    """A summary.json as python -m loadtest writes it: step 0 meets the SLO, step 1 does not."""
    steps = [{"step": 0, "users": 4, "start": 0.0}, {"step": 1, "users": 8, "start": 10.0}]
    records = [agent_record(t / 4, 1000) for t in range(40)]  # 4 runs/s, well within 5 s
    records += [agent_record(10 + t / 4, 9000) for t in range(40)]  # too slow
    summary = summarise(records, steps, Slo(ttft_p99_ms=200, itl_p99_ms=50, run_p95_ms=5000))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "summary.json"
    path.write_text(json.dumps(summary))
    return path


def _model(start: float) -> dict:
    return {
        "kind": "model",
        "name": "chat",
        "start": start,
        "end": start + 0.1,
        "ok": True,
        "error": None,
        "ttft_ms": 50.0,
        "itl_ms": [10.0],
        "tpot_ms": 10.0,
        "e2e_ms": 60.0,
        "prompt_tokens": 1500,
        "output_tokens": 2,
    }


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_writes_the_four_results_next_to_the_summary(tmp_path, capsys):
    summary = write_summary(tmp_path / "20260101-120000")
    status, out, err = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert (status, err) == (0, "")
    folder = summary.parent
    document = json.loads((folder / "cost.json").read_text())
    assert document["unit"] == "agent run"
    assert document["workload"]["capacity_per_s"] == pytest.approx(4.0)
    assert document["workload"]["input_tokens"] == 3000
    assert document["workload"]["model_calls"] == 2
    assert document["settings"]["gpu_hourly_usd"] == {
        "value": 6.35,
        "source": "preset h200-runpod-on-demand (RunPod list price, on-demand, 2026-03)",
    }
    # with the cached-input price, 4 runs/s on two replicas never beat the API once the hidden
    # costs count; one replica, every paid hour busy, does
    assert document["break_even"]["with_hidden_costs"] is None
    assert document["break_even"]["without_hidden_costs"]["requests_per_day"] > 0
    assert (folder / "cost.md").read_text() in out  # the terminal shows the same tables
    assert (folder / "cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (folder / "cost.html").read_text()
    assert "<svg" in page and "<table>" in page and "Assumptions" in page
    # every assumption is printed next to the result
    for needle in ("H200", "$6.35/h", "GPT-5 mini", "office_hours", "summary.json", "2026-03"):
        assert needle in out, needle
    assert "Sensitivity" in out and "Break-even" in out


def test_the_report_says_when_the_capacity_is_only_a_lower_bound(tmp_path, capsys):
    # one step, met: the limit was never found; agent and model users shared it
    records = [agent_record(t / 2, 1000) for t in range(20)] + [_model(t / 4) for t in range(40)]
    summary = summarise(records, [{"step": 0, "users": 6, "start": 0.0}], Slo(200, 50, 5000))
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir()
    path.write_text(json.dumps(summary))
    status, out, _ = run(capsys, str(path))
    assert status == 0
    # one step cannot show the knee: said in one line, not mistaken for a tested maximum
    said = [line for line in out.splitlines() if "the sweep had one step (6 users)" in line]
    assert len(said) == 1 and "find the knee" in said[0]
    assert "raw model requests/s" in out
    # both caveats are about the capacity: given explicitly, they no longer apply
    status, out, _ = run(capsys, str(path), "--capacity-requests-per-s", "3")
    assert status == 0
    assert "the sweep had one step" not in out and "raw model requests/s" not in out


def _sweep(tmp_path, *steps: tuple[int, float, float]) -> Path:
    """summary.json of a sweep: per step (users, runs/s, the share of runs that failed), 10 s
    each, every run 300 ms."""
    records, marks = [], []
    for number, (users, rate, failed) in enumerate(steps):
        start = number * 10.0
        marks.append({"step": number, "users": users, "start": start})
        count = int(rate * 10)
        for i in range(count):
            record = agent_record(start + i / rate, 300)
            if i < failed * count:
                record |= {"ok": False, "error": "HTTP 503"}
            records.append(record)
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir()
    path.write_text(json.dumps(summarise(records, marks, Slo(200, 50, 5000))))
    return path


def test_a_step_that_served_less_is_a_saturated_replica_not_a_higher_capacity(tmp_path, capsys):
    # the demo sweep's shape: 6 users 15.5 runs/s, then 8 users 13.8 runs/s, both within the SLO
    path = _sweep(tmp_path, (4, 10.0, 0), (6, 15.5, 0), (8, 13.8, 0))
    summary = LoadSummary.read(path)
    assert summary.capacity_at_slo is not None and summary.capacity_at_slo.users == 6
    assert summary.capacity_reading()[0] is CapacityReading.SATURATED
    status, out, _ = run(capsys, str(path))
    assert status == 0
    assert re.search(r"the replica was saturated: 8 users were served 13\.\d\d/s, no more than the "
                     r"6 users' 15\.\d\d/s", out)  # fmt: skip
    assert "still met the SLO" not in out and "at least this" not in out
    assert json.loads((path.parent / "cost.json").read_text())["summary"]["lower_bound"] is False


def test_a_step_that_missed_the_slo_ends_the_sweep_without_a_caveat(tmp_path, capsys):
    path = _sweep(tmp_path, (4, 10.0, 0), (6, 15.5, 0), (8, 16.0, 0.2))
    summary = LoadSummary.read(path)
    assert summary.capacity_at_slo is not None and summary.capacity_at_slo.users == 6
    assert summary.capacity_reading()[0] is CapacityReading.SLO_MISSED
    status, out, _ = run(capsys, str(path))
    assert status == 0 and "saturated" not in out and "still met the SLO" not in out


def test_throughput_still_rising_at_the_last_step_is_a_lower_bound(tmp_path, capsys):
    path = _sweep(tmp_path, (4, 10.0, 0), (6, 15.5, 0))
    assert LoadSummary.read(path).capacity_reading()[0] is CapacityReading.LOWER_BOUND
    status, out, _ = run(capsys, str(path))
    assert status == 0 and "still met the SLO and served the most" in out


def test_facade_runs_beside_the_agent_runs_are_a_mixed_load_too(tmp_path, capsys):
    facade = [{**agent_record(t / 2, 1000), "kind": "facade"} for t in range(10)]
    records = [agent_record(t / 2, 1000) for t in range(20)] + facade
    summary = summarise(records, [{"step": 0, "users": 6, "start": 0.0}], Slo(200, 50, 5000))
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir()
    path.write_text(json.dumps(summary))
    status, out, _ = run(capsys, str(path))
    assert status == 0
    assert re.search(r"0\.95\d* facade runs/s shared the capacity step", out)
    assert "raw model requests/s" not in out
    # the facade's runs are agent runs too: counted by their tokens, 1.9 + 0.95 runs/s
    document = json.loads((path.parent / "cost.json").read_text())
    assert document["workload"]["capacity_per_s"] == pytest.approx(2.85, rel=0.01)


def test_explicit_numbers_need_no_summary(tmp_path, capsys):
    status, out, err = run(
        capsys,
        "--out",
        str(tmp_path),
        "--capacity-requests-per-s",
        "3",
        "--input-tokens-per-request",
        "2000",
        "--output-tokens-per-request",
        "150",
    )
    assert (status, err) == (0, "")
    assert json.loads((tmp_path / "cost.json").read_text())["summary"] is None
    assert "per request" in out


def test_the_newest_results_folder_is_the_default(tmp_path, monkeypatch, capsys):
    write_summary(tmp_path / "20260101-120000")
    newest = write_summary(tmp_path / "20260102-090000")
    (tmp_path / "20260101-180000").mkdir()  # a run that wrote no summary
    assert newest_summary(tmp_path) == newest
    monkeypatch.setenv("LOAD_RESULTS_DIR", str(tmp_path))
    status, _, err = run(capsys)
    assert (status, err) == (0, "")
    assert (newest.parent / "cost.json").exists()


def test_no_summary_anywhere_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOAD_RESULTS_DIR", str(tmp_path))
    status, out, err = run(capsys)
    assert (status, out) == (2, "")
    assert err == (
        f"configuration error: SUMMARY: none given and no */summary.json under {tmp_path} "
        "(run `make load` first, or set capacity_requests_per_s and the tokens per request)\n"
    )


def test_layers_preset_file_environment_flag():
    # the preset fills the price, the file names the preset, a variable and a flag win in turn
    file_only = load(EXAMPLE, {}, {})
    assert file_only.settings.gpu_hourly_usd == GPU_PRESETS["h200-runpod-on-demand"].gpu_hourly_usd
    assert file_only.sources["gpu_hourly_usd"].kind == "preset"
    # the file gives ops hours; the labour is hours × the sourced rate
    assert file_only.sources["ops_hours_per_month"].kind == "file"
    assert file_only.settings.ops_usd_per_month == pytest.approx(16 * ENGINEER_USD_PER_HOUR)
    assert "BLS" in file_only.sources["ops_usd_per_month"].origin
    env = load(EXAMPLE, {"COST_GPU_HOURLY_USD": "2.5", "COST_OPS_USD_PER_HOUR": "50"}, {})
    assert (env.settings.gpu_hourly_usd, env.settings.ops_usd_per_month) == (2.5, 800)
    assert env.sources["ops_usd_per_month"].origin.endswith("(COST_OPS_USD_PER_HOUR)")
    assert env.sources["gpu_hourly_usd"].setting == "COST_GPU_HOURLY_USD"
    flag = load(EXAMPLE, {"COST_GPU_HOURLY_USD": "2.5"}, {"gpu_hourly_usd": "1.75"})
    assert flag.settings.gpu_hourly_usd == 1.75
    assert flag.sources["gpu_hourly_usd"].setting == "--gpu-hourly-usd"
    # another preset changes the prices it fills, not those set explicitly
    other = load(None, {}, {"api_preset": "claude-haiku-4.5", "api_input_usd_per_million": "0.8"})
    assert other.settings.api_output_usd_per_million == 5.0
    assert other.settings.api_input_usd_per_million == 0.8
    # a profile fills the daily profile unless set
    flat = load(None, {}, {"traffic_profile": "flat"})
    assert flat.settings.daily_profile == pytest.approx([100 / 24] * 24)
    own = load(None, {}, {"traffic_profile": "flat", "daily_profile": "0 " * 23 + "100"})
    assert own.settings.daily_profile[-1] == 100
    assert own.sources["daily_profile"].setting == "--daily-profile"


def test_the_default_presets_are_the_stacks_own_price_settings():
    # the report and the Cost dashboard (common.cost.CostSettings) start from the same prices
    defaults = CostSettings.model_fields
    gpu, api = GPU_PRESETS[DEFAULT_GPU_PRESET], API_PRESETS[DEFAULT_API_PRESET]
    assert gpu.gpu_hourly_usd == defaults["gpu_hourly_usd"].default
    assert api.api_input_usd_per_million == defaults["api_input_usd_per_million"].default
    assert api.api_output_usd_per_million == defaults["api_output_usd_per_million"].default


def test_the_default_gpu_price_is_on_demand_everywhere_it_is_written():
    # an always-on service is priced on demand; spot stays a preset to choose
    assert DEFAULT_GPU_PRESET == "h200-runpod-on-demand" and "h200-runpod-spot" in GPU_PRESETS
    defaults = {
        f"COST_{name.upper()}": field.default for name, field in CostSettings.model_fields.items()
    }
    compose_text = (REPO_ROOT / "deploy" / "compose.yaml").read_text()
    example_text = (REPO_ROOT / "deploy" / ".env.example").read_text()
    for variable, default in defaults.items():
        (in_compose,) = re.findall(rf"\${{{variable}:-([^}}]+)}}", compose_text)
        (in_example,) = re.findall(rf"^{variable}=(.+)$", example_text, re.MULTILINE)
        assert float(in_compose) == float(in_example) == default, variable


def test_every_preset_price_names_its_source_and_date():
    for preset in [*GPU_PRESETS.values(), *API_PRESETS.values()]:
        assert preset.source and preset.date[:4].isdigit(), preset


SUMMARY_PROBLEMS = {
    "no capacity_at_slo": {"steps": []},
    "capacity_at_slo is null": {"steps": [], "capacity_at_slo": None},
    "lacks runs_per_s, prompt_tokens_per_run": {
        "steps": [],
        "capacity_at_slo": {
            "step": 0,
            "users": 4,
            "model_requests_per_s": 1.0,
            "output_tokens_per_s": 10.0,
            "input_tokens_per_s": 100.0,
            "output_tokens_per_run": None,
        },
    },
}


@pytest.mark.parametrize("problem", SUMMARY_PROBLEMS)
def test_a_summary_without_the_capacity_fields_is_refused(tmp_path, capsys, problem):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(SUMMARY_PROBLEMS[problem]))
    status, out, err = run(capsys, str(path))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("configuration error: SUMMARY: ")
    assert problem in err


def _bad_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cost.toml"
    path.write_text(text)
    return path


BAD_SETTINGS = [
    # (flags, environment, settings file text, the setting the error must name)
    (["--gpu-hourly-usd", "-1"], {}, None, "--gpu-hourly-usd"),
    ([], {"COST_API_INPUT_USD_PER_MILLION": "-0.25"}, None, "COST_API_INPUT_USD_PER_MILLION"),
    ([], {}, "api_output_usd_per_million = -2\n", "cost.toml: api_output_usd_per_million"),
    (["--gpu-preset", "a100-somewhere"], {}, None, "--gpu-preset: unknown GPU preset"),
    ([], {}, 'api_preset = "gpt-9"\n', "cost.toml: api_preset: unknown API preset"),
    ([], {"COST_TRAFFIC_PROFILE": "weekends"}, None, "COST_TRAFFIC_PROFILE: unknown traffic"),
    ([], {}, "gpu_price = 2\n", "cost.toml: gpu_price: unknown setting (did you mean"),
    ([], {}, "gpu_count = [\n", "cost.toml: not a TOML file"),
    (["--gpu-count", "0"], {}, None, "--gpu-count"),
    (["--capacity-basis", "vibes"], {}, None, "--capacity-basis"),
    (["--sensitivity-step", "1.5"], {}, None, "--sensitivity-step"),
    # a daily profile that does not add up: too few hours, a sum short of 100 %, a negative hour
    (["--daily-profile", "10,20,70"], {}, None, "--daily-profile: 3 numbers, need 24"),
    (["--daily-profile", ",".join(["4"] * 24)], {}, None, "add up to 96 %, not 100 %"),
    (
        [],
        {"COST_DAILY_PROFILE": ",".join(["5"] * 20 + ["-5", "5", "5", "0"])},
        None,
        "COST_DAILY_PROFILE: hour 20:00 has -5 %, below 0",
    ),
    ([], {}, "daily_profile = [100]\n", "cost.toml: daily_profile: 1 numbers, need 24"),
    (["--daily-profile", "lots"], {}, None, "--daily-profile"),
    # settings of an earlier version say what replaced them
    ([], {"COST_BUSY_SHARE": "0.5"}, None, "COST_BUSY_SHARE: no longer a setting: use daily"),
    ([], {}, "billing_hours_per_day = 10\n", "billing_hours_per_day: no longer a setting"),
    (["--scaling", "sometimes"], {}, None, "--scaling"),
    (["--min-replicas", "0"], {}, None, "--min-replicas"),
    (
        ["--ops-hours-per-month", "10", "--ops-usd-per-month", "900"],
        {},
        None,
        "set the ops labour one way",
    ),
    (["--api-system-prompt-file", "nowhere.txt"], {}, None, "--api-system-prompt-file: no such"),
    (["--settings", "missing.toml"], {}, None, "--settings: cannot read"),
    (["--no-such-flag", "1"], {}, None, "unrecognized arguments"),
]


@pytest.mark.parametrize(("flags", "environment", "text", "named"), BAD_SETTINGS)
def test_a_bad_setting_is_one_line_naming_it(
    tmp_path, capsys, monkeypatch, flags, environment, text, named
):
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    summary = write_summary(tmp_path / "run")
    argv = [str(summary), *flags]
    if text is not None:
        argv += ["--settings", str(_bad_file(tmp_path, text))]
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("configuration error: ") and named in err, err
    assert not (tmp_path / "run" / "cost.json").exists()


def test_errors_name_the_file_key_with_its_value(tmp_path):
    path = _bad_file(tmp_path, "retraining_every_days = 0\n")
    with pytest.raises(SettingError) as error:
        load(path, {}, {})
    assert str(error.value) == (
        f"{path}: retraining_every_days: Input should be greater than or equal to 1 (got 0)"
    )


def test_the_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.cost", "--gpu-hourly-usd", "-1"],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("COST_")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "configuration error: --gpu-hourly-usd: Input should be greater than or equal to 0 "
        "(got '-1')"
    ]


def _mixed_summary(tmp_path: Path, model: bool = True, agent: bool = True) -> Path:
    records = [agent_record(t / 2, 1000) for t in range(20)] if agent else []
    records += [_model(t / 4) for t in range(40)] if model else []
    summary = summarise(records, [{"step": 0, "users": 6, "start": 0.0}], Slo(200, 50, 5000))
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary))
    return path


def test_the_capacity_basis_follows_what_the_summary_measured(tmp_path, capsys):
    # agent users only: runs/s is the capacity itself
    agent_only = write_summary(tmp_path / "agents")
    status, out, _ = run(capsys, str(agent_only))
    assert status == 0
    document = json.loads((agent_only.parent / "cost.json").read_text())
    assert document["summary"]["capacity_basis"] == "runs"
    assert document["workload"]["capacity_per_s"] == pytest.approx(4.0)
    assert "runs/s of step 0 (4 users), agent users only" in out
    # agent and model users shared the step: every token it served, counted as agent runs
    mixed = _mixed_summary(tmp_path)
    status, out, _ = run(capsys, str(mixed))
    assert status == 0
    document = json.loads((mixed.parent / "cost.json").read_text())
    assert document["summary"]["capacity_basis"] == "tokens"
    # 1.9 runs/s × 3,100 tokens + 3.8 model requests/s × 1,502 tokens, ÷ 3,100 per run
    expected = (20 * 3100 + 40 * 1502) / 10.5 / 3100
    assert document["workload"]["capacity_per_s"] == pytest.approx(expected, rel=0.01)
    capacity_row = next(line for line in out.splitlines() if "capacity per replica at" in line)
    assert "tokens/s of step 0 (6 users), shared with 3.81 raw model requests/s" in capacity_row
    # model users only: the unit is a model request
    model_only = _mixed_summary(tmp_path / "m", agent=False)
    status, out, _ = run(capsys, str(model_only))
    assert status == 0 and "per model request" in out.splitlines()[0]


@pytest.mark.parametrize(
    ("agent", "why"),
    [
        (True, "runs needs a capacity step of agent runs only, but step 0 (6 users) of"),
        (False, "runs needs agent runs, and step 0 (6 users) of"),
    ],
    ids=["mixed", "model users only"],
)
def test_a_basis_the_summary_cannot_support_is_refused_saying_why(tmp_path, capsys, agent, why):
    summary = _mixed_summary(tmp_path, agent=agent)
    status, out, err = run(capsys, str(summary), "--capacity-basis", "runs")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"configuration error: --capacity-basis: {why}")
    assert not (summary.parent / "cost.json").exists()


def test_the_staircase_is_in_the_gpus_the_load_tests_replicas_served_on(tmp_path, capsys):
    """Two replicas of two GPUs each took the load: a replica's capacity is half the step's,
    and each replica costs two GPUs."""
    summary = write_summary(tmp_path / "20260101-120000")
    document = json.loads(summary.read_text())
    document["backend"] = {"kind": "vllm", "simulated": False, "replicas": 2,
                           "replica_names": ["vllm-0", "vllm-1"], "gpus_per_replica": 2,
                           "notes": [], "sources": []}  # fmt: skip
    summary.write_text(json.dumps(document))
    status, _, err = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert (status, err) == (0, ""), err
    cost = json.loads((summary.parent / "cost.json").read_text())
    assert cost["workload"]["capacity_per_s"] == pytest.approx(2.0)  # 4 runs/s ÷ 2 replicas
    assert "÷ 2 replicas" in cost["workload"]["sources"]["capacity_per_s"]
    assert cost["settings"]["gpu_count"] == {
        "value": 2, "source": "summary.json: 2 GPU(s) per replica, from DCGM's series"
    }  # fmt: skip
    # two GPUs a replica, from the two replicas kept running (the default)
    assert all(p["gpus"] == 2 * p["replicas"] for p in cost["staircase"])
    assert cost["staircase"][0]["replicas"] == 2
    # a setting still wins over what was measured
    run(capsys, str(summary), "--settings", str(EXAMPLE), "--gpu-count", "1")
    cost = json.loads((summary.parent / "cost.json").read_text())
    assert cost["settings"]["gpu_count"]["value"] == 1


def test_the_replicas_and_their_gpus_come_from_the_series_labels():
    from loadtest.backend import add_replicas

    block: dict = {"notes": [], "sources": []}
    rows = [{"metric": {"replica": r}, "value": [0, "1"]} for r in ("vllm-1", "vllm-0")]
    gpus = [{"metric": {"replica": r}, "value": [0, "2"]} for r in ("vllm-0", "vllm-1")]
    add_replicas(block, rows, gpus, "Prometheus")
    assert (block["replicas"], block["replica_names"], block["gpus_per_replica"]) == (
        2, ["vllm-0", "vllm-1"], 2
    )  # fmt: skip
    unlabelled: dict = {"notes": [], "sources": []}
    add_replicas(unlabelled, [{"metric": {}, "value": [0, "1"]}], [], "Prometheus")
    assert "replicas" not in unlabelled and "no replica label" in unlabelled["notes"][0]
