"""What the cost report says first, in every format: the verdict, and a banner when the capacity
is not a GPU measurement; money as money; titles that follow the prices used; a chart where
the decision is readable; `--help` with defaults and choices; the report in a real browser."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from loadtest.cost.__main__ import main
from loadtest.cost.settings import CalculatorSettings
from loadtest.results import Slo, summarise
from tests import browser
from tests.loadtest.records import agent_record
from tests.support import REPO_ROOT

EXAMPLE = REPO_ROOT / "loadtest" / "cost.example.toml"
# a number written with an exponent: what money must never look like
EXPONENT = re.compile(r"\d(?:\.\d+)?[eE][-+]?\d")

SIMULATOR = {
    "kind": "simulator",
    "simulated": True,
    "name": "modelsim",
    "version": "0.32.0",
    "models": ["leave-copilot"],
    "gpu": {"name": "NVIDIA H200 (simulated)", "count": 1, "simulated": True},
    "sources": ["GET /version", "GET /v1/models"],
    "notes": [],
}
VLLM = {
    "kind": "vllm",
    "simulated": False,
    "name": "vllm",
    "version": "0.32.0",
    "models": ["leave-copilot"],
    "gpu": {"name": "NVIDIA H200", "count": 1, "simulated": False},
    "sources": ["GET /version", "GET /v1/models", "DCGM_FI_DEV_GPU_UTIL labels (Prometheus)"],
    "notes": [],
}


@pytest.fixture(autouse=True)
def no_cost_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("COST_") or name == "LOAD_RESULTS_DIR":
            monkeypatch.delenv(name)


def summary_file(folder: Path, backend: dict[str, Any] | None = None, runs_per_s: int = 4) -> Path:
    """An agent-only summary whose one step met the SLO at `runs_per_s`, served by `backend`."""
    records = [agent_record(t / runs_per_s, 1000) for t in range(10 * runs_per_s)]
    records += [agent_record(10 + t / 8, 9000) for t in range(80)]  # the next step: too slow
    steps = [{"step": 0, "users": 4, "start": 0.0}, {"step": 1, "users": 8, "start": 10.0}]
    summary = summarise(records, steps, Slo(200, 50, 5000))
    if backend is not None:
        summary["backend"] = backend
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "summary.json"
    path.write_text(json.dumps(summary))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def results(folder: Path) -> dict[str, Any]:
    return {
        "md": (folder / "cost.md").read_text(),
        "json": json.loads((folder / "cost.json").read_text()),
        "html": (folder / "cost.html").read_text(),
        "png": (folder / "cost.png").read_bytes(),
    }


def svg_text(page: str) -> str:
    """The chart's words as the inline SVG holds them (the PNG is the same figure drawn)."""
    svg = page[page.index("<svg") : page.index("</svg>")]
    return re.sub(r"\s+", " ", " ".join(re.findall(r">([^<>]+)<", svg)))


def test_every_format_opens_with_one_verdict_line(tmp_path, capsys):
    # 10 runs/s: a replica that beats the API at its cached-input price
    summary = summary_file(tmp_path / "run", VLLM, runs_per_s=10)
    status, out, _ = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert status == 0
    got = results(summary.parent)
    document = got["json"]
    verdict = document["verdict"]
    point, found = document["operating_point"], document["break_even"]["with_hidden_costs"]
    cheaper_by = point["self_host_usd_per_day"] - point["api_usd_per_day"]
    assert cheaper_by > 0  # 20,000 runs a day: the API is cheaper here
    # with two replicas always running the break-even falls on their stretch, so from it on
    # self-hosting stays cheaper: no second volume to name
    assert found["cheaper_from_requests_per_day"] == pytest.approx(found["requests_per_day"])
    assert verdict == (
        f"At 20,000 agent runs/day the API is ${cheaper_by:,.0f}/day cheaper; self-hosting "
        f"wins from {found['requests_per_day']:,.0f}/day (hidden costs of "
        f"${sum(document['self_host']['hidden_usd_per_day'].values()):,.0f}/day included; "
        f"API input {document['api']['cached_share']:.0%} cached at $0.025/1M)."
    )
    # the terminal and Markdown: right under the title, before any table
    lines = got["md"].splitlines()
    assert lines[2] == f"**{verdict}**" and out.splitlines()[2] == lines[2]
    assert got["html"].index(f'<p class="verdict">{verdict}</p>') < got["html"].index("<table>")
    assert verdict[:60] in svg_text(got["html"])  # the chart's header (wrapped)
    assert document["banner"] is None and "BACKEND" not in got["md"]  # measured on vLLM
    assert "measured on vLLM 0.32.0, 1 × NVIDIA H200" in document["title"]


@pytest.mark.parametrize(
    ("flags", "peak", "redundancy"),
    [
        ([], "; always on: 48 GPU-hours/day (scaled down off-hours: 33", "at least 2 replicas"),
        (
            ["--scaling", "scale_down", "--min-replicas", "1"],
            "; scaled down off-hours: 24 GPU-hours/day (always on: 24), KEDA keeping at "
            "least 1 in 09:00–18:00, 1 in the other hours, at most 1.",
            "none — min_replicas = 1, a single point of failure",
        ),
    ],
    ids=["always on, N+1", "scaled down, one replica"],
)
def test_every_format_names_pricing_peak_sizing_and_redundancy_under_the_verdict(
    tmp_path, capsys, flags, peak, redundancy
):
    summary = summary_file(tmp_path / "run", VLLM, runs_per_s=10)
    status, out, _ = run(capsys, str(summary), "--settings", str(EXAMPLE), *flags)
    assert status == 0
    got = results(summary.parent)
    pricing, sizing, kept = got["json"]["headline"]
    assert pricing.startswith("API pricing: GPT-5 mini at $0.25 in / $0.025 cached in / $2.00")
    assert "of its input cached (" in pricing
    assert sizing.startswith(
        "Peak sizing: the busiest hour, 10:00–11:00, carries 11.0% of the day's agent runs "
        "(2.64× the day's mean rate): 20,000/day need "
    )
    assert peak in sizing
    assert kept.startswith("Redundancy: ") and redundancy in kept
    # the terminal and Markdown: the three lines right under the verdict, before any table
    lines = got["md"].splitlines()
    assert lines[4:7] == [f"- {pricing}", f"- {sizing}", f"- {kept}"]
    assert out.splitlines()[4:7] == lines[4:7]
    page = got["html"]
    for line in (pricing, sizing, kept):
        assert page.index(html.escape(line)) < page.index("<table>")
    assert "Peak sizing: the busiest hour" in svg_text(page)  # the chart's header


@pytest.mark.parametrize(
    ("backend", "banner"),
    [
        (SIMULATOR, "SIMULATED BACKEND — not a GPU measurement"),
        (None, "BACKEND NOT RECORDED"),
        (
            {**VLLM, "kind": "unknown", "notes": ["GET /version: HTTP 404"]},
            "BACKEND NOT IDENTIFIED",
        ),
    ],
    ids=["simulator", "not recorded", "unknown"],
)
def test_a_capacity_that_is_no_gpu_measurement_carries_a_banner_in_every_format(
    tmp_path, capsys, backend, banner
):
    summary = summary_file(tmp_path / "run", backend)
    status, out, _ = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert status == 0
    got = results(summary.parent)
    assert got["json"]["banner"].startswith(banner)
    assert out.splitlines()[2].startswith(f"> **{banner}")  # terminal and Markdown
    assert got["md"].splitlines()[2].startswith(f"> **{banner}")
    assert f'<p class="banner" role="alert">{banner}' in got["html"]
    assert banner in svg_text(got["html"])
    title = got["json"]["title"]
    assert "measured" not in title.replace("not measured", "")
    if backend is SIMULATOR:
        assert "capacity from the simulator, not measured" in title
        assert "the model simulator 0.32.0, serving leave-copilot" in got["md"]
        # the simulator's GPU says it is simulated once, not twice (issue 34)
        assert "1 × NVIDIA H200 (simulated) " in got["md"]
        assert "(simulated) (simulated)" not in out + got["md"] + got["html"]


def test_a_capacity_given_as_a_setting_is_not_called_measured(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--capacity-requests-per-s", "3"]
    argv += ["--input-tokens-per-request", "2000", "--output-tokens-per-request", "150"]
    status, _, _ = run(capsys, *argv)
    assert status == 0
    document = json.loads((tmp_path / "cost.json").read_text())
    assert document["banner"] is None and "capacity given as a setting" in document["title"]


def test_money_is_written_as_money(tmp_path, capsys):
    # a hosted 8B at cents per million tokens: fractions of a cent per request
    summary = summary_file(tmp_path / "run", VLLM)
    argv = [str(summary), "--api-preset", "llama-3.1-8b-hosted-low", "--gpu-hourly-usd", "0.5"]
    status, out, _ = run(capsys, *argv)
    assert status == 0
    got = results(summary.parent)
    assert not EXPONENT.search(out), EXPONENT.search(out)
    assert not EXPONENT.search(got["md"]) and not EXPONENT.search(svg_text(got["html"]))
    assert re.search(r"\$0\.0000\d{2,3}\b", out), out  # e.g. $0.0000646, not $6.46e-05


def test_the_title_names_the_api_only_while_its_prices_are_used(tmp_path, capsys):
    summary = summary_file(tmp_path / "run", VLLM)
    custom = ["--api-input-usd-per-million", "1", "--api-output-usd-per-million", "5"]
    status, out, _ = run(capsys, str(summary), *custom, "--gpu-hourly-usd", "2.5")
    assert status == 0
    title = json.loads((summary.parent / "cost.json").read_text())["title"]
    assert "GPT-5 mini" not in title
    assert "vs an API at $1.00 in / $5.00 out per 1M tokens" in title
    assert "1 × H200 at $2.50/h" in title
    # a named preset, or a named model, is named
    status, out, _ = run(capsys, str(summary), "--api-preset", "claude-haiku-4.5")
    assert "vs Claude Haiku 4.5 at $1.00 in / $0.10 cached in / $5.00 out" in out.splitlines()[0]
    status, out, _ = run(capsys, str(summary), *custom, "--api-model", "Our contract")
    assert "vs Our contract at $1.00 in / $5.00 out" in out.splitlines()[0]


def test_without_a_settings_file_the_report_says_no_hidden_costs_were_counted(tmp_path, capsys):
    summary = summary_file(tmp_path / "run", VLLM)
    status, out, _ = run(capsys, str(summary))
    assert status == 0
    assert "no hidden costs counted: ops, retraining and storage are $0" in out.splitlines()[2]
    assert "fixed costs none set ($0)" in out


def test_help_shows_every_default_and_the_choices(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert (
        "--gpu-hourly-usd VALUE What the GPU host costs per hour (on-demand). Default: 6.35."
        in text
    )
    assert "Choices: auto, runs, tokens, output_tokens. Default: auto." in text
    assert "Choices: flat, office_hours. Default: office_hours." in text
    assert "h200-runpod-spot, h200-runpod-on-demand" in text
    assert "Default: h200-runpod-on-demand." in text
    assert "--requests-per-day VALUE" in text and "Default: none." in text
    assert text.count("Default:") == len(CalculatorSettings.model_fields)  # every setting


def test_the_html_report_renders_offline_with_its_chart_and_verdict(tmp_path, capsys):
    summary = summary_file(tmp_path / "run", SIMULATOR)
    status, _, _ = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert status == 0
    page = summary.parent / "cost.html"
    source = page.read_text()
    # self-contained: nothing to fetch from anywhere
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", source)
    dom = browser.rendered_dom(page.as_uri())
    document = json.loads((summary.parent / "cost.json").read_text())
    assert f'<p class="verdict">{document["verdict"]}</p>' in dom
    assert '<p class="banner" role="alert">SIMULATED BACKEND' in dom
    svg = dom[dom.index("<svg") : dom.index("</svg>")]
    assert svg.count("<path") > 20 and "break-even with hidden costs" in svg
    shot = browser.screenshot(page.as_uri(), tmp_path / "page.png")
    assert shot.stat().st_size > 20_000  # a rendered chart, not a blank page


@pytest.mark.parametrize("volume", ["20000", "150000", "1e9"])
def test_the_chart_shows_every_mark_and_no_label_sits_on_a_tick_label(volume):
    from matplotlib.text import Annotation

    from loadtest.cost import chart, report
    from loadtest.cost.calculate import Inputs, calculate
    from loadtest.cost.inputs import prompt_tokens, workload
    from loadtest.cost.settings import load

    flags = {
        "capacity_requests_per_s": "2.7",
        "input_tokens_per_request": "3000",
        "output_tokens_per_request": "100",
        "model_calls_per_request": "2.5",
        "requests_per_day": volume,
    }
    loaded = load(EXAMPLE, {}, flags)
    inputs = Inputs(loaded.settings, workload(None, loaded), prompt_tokens(loaded))
    figures = calculate(inputs)
    built = report.build(inputs, figures, loaded.sources, [])
    figure = chart.draw(figures, built, "agent run", float(volume))
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    plot = figure.axes[1]
    left, right = plot.get_xlim()
    found = [figures.break_even_with_hidden, figures.break_even_without_hidden]
    marks = [x.requests_per_day for x in found if x] + [
        x.cheaper_from_requests_per_day for x in found if x
    ]
    assert all(left < x < right for x in [*marks, float(volume)])  # both break-evens, the volume
    labels = [a for a in plot.get_children() if isinstance(a, Annotation)]
    assert len(labels) == len(set(marks)) + 1
    ticks = [
        t.get_window_extent(renderer)
        for t in plot.get_xticklabels() + plot.get_yticklabels()
        if t.get_text()
    ]
    boxes = [a.get_window_extent(renderer) for a in labels]
    plot_box = plot.get_window_extent(renderer)
    for box in boxes:
        assert not any(box.overlaps(tick) for tick in ticks)
        assert plot_box.x0 <= box.x0 and box.x1 <= plot_box.x1  # inside the plot, readable
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1 :])


def test_a_single_replica_is_named_as_no_redundancy(tmp_path, capsys):
    summary = summary_file(tmp_path / "run", VLLM)
    status, out, _ = run(capsys, str(summary), "--settings", str(EXAMPLE), "--min-replicas", "1")
    assert status == 0
    assert "1 — no redundancy: a single point of failure" in out
    assert results(summary.parent)["json"]["staircase"][0]["replicas"] == 1
    status, out, _ = run(capsys, str(summary), "--settings", str(EXAMPLE))
    assert status == 0 and "no redundancy" not in out and "at least 2 (N+1" in out
    status, _, err = run(capsys, str(summary), "--min-replicas", "0")
    assert status == 2
    assert "--min-replicas: Input should be greater than or equal to 1 (got '0')" in err
