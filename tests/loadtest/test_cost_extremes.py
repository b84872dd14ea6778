"""Absurd inputs to the cost calculator: values outside a sane range are refused with one line;
every accepted one gives a report of the rows that matter, in bounded memory.
(benchmarks/cost_volumes.py prints the time and peak memory of each.)"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import replace

import pytest

from loadtest.cost import chart, report
from loadtest.cost.__main__ import main
from loadtest.cost.calculate import Inputs, calculate
from loadtest.cost.inputs import prompt_tokens, workload
from loadtest.cost.maths import SelfHost, Traffic
from loadtest.cost.settings import load
from tests.support import REPO_ROOT

WORKLOAD = [
    *("--capacity-requests-per-s", "2.7"),
    *("--input-tokens-per-request", "3000", "--output-tokens-per-request", "100"),
]
EXAMPLE = str(REPO_ROOT / "loadtest" / "cost.example.toml")


@pytest.fixture(autouse=True)
def no_cost_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("COST_"):
            monkeypatch.delenv(name)


REFUSED = [
    ("--gpu-hourly-usd", "inf", "Input should be a finite number"),
    ("--gpu-hourly-usd", "nan", "Input should be a finite number"),
    ("--gpu-hourly-usd", "1e300", "less than or equal to 1000"),
    ("--api-output-usd-per-million", "-inf", "Input should be a finite number"),
    ("--api-blended-usd-per-million", "1e300", "less than or equal to 1000"),
    ("--requests-per-day", "1e30", "less than or equal to 1000000000000"),
    ("--requests-per-day", "nan", "Input should be a finite number"),
    ("--requests-per-day", "0", "greater than 0"),
    ("--capacity-requests-per-s", "1e-300", "greater than or equal to 0.001"),
    ("--input-tokens-per-request", "1e300", "less than or equal to 100000000"),
    ("--ops-usd-per-month", "1e300", "less than or equal to 1000000000"),
    ("--retraining-every-days", "1e-9", "greater than or equal to 1"),
    ("--ops-hours-per-month", "1e300", "less than or equal to 744"),
    ("--peak-factor", "1e300", "less than or equal to 100"),
    ("--gpu-count", "100000000", "less than or equal to 1024"),
]


@pytest.mark.parametrize(("flag", "value", "why"), REFUSED, ids=[f"{f} {v}" for f, v, _ in REFUSED])
def test_a_value_outside_the_sane_range_is_refused_in_one_line(tmp_path, capsys, flag, value, why):
    status = main(["--out", str(tmp_path), *WORKLOAD, f"{flag}={value}"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"configuration error: {flag}: ") and why in captured.err
    assert not list(tmp_path.iterdir())  # nothing written


def figures_at(requests_per_day: str, capacity: str = "2.7") -> tuple[Inputs, object]:
    flags = {
        "capacity_requests_per_s": capacity,
        "input_tokens_per_request": "3000",
        "output_tokens_per_request": "100",
        "model_calls_per_request": "2.5",
        "requests_per_day": requests_per_day,
        # every input token at the input price, so that this layout's break-even (~180,000)
        # stays where these cases were drawn around (test_cost_cached prices the cache)
        "api_cached_share": "0",
        # 90 % of the requests in 9 hours, the profile these cases were drawn around
        "daily_profile": ",".join([repr(10 / 15)] * 9 + ["10"] * 9 + [repr(10 / 15)] * 6),
    }
    loaded = load(REPO_ROOT / "loadtest" / "cost.example.toml", {}, flags)
    inputs = Inputs(loaded.settings, workload(None, loaded), prompt_tokens(loaded))
    return inputs, calculate(inputs)


@pytest.mark.parametrize("volume", ["20000", "1e9", "1e12"])
def test_the_staircase_shows_the_rows_that_matter_whatever_the_volume(volume):
    inputs, figures = figures_at(volume)
    rows = figures.staircase
    assert len(rows) <= 12, len(rows)
    replicas = [row.replicas for row in rows]
    asked = figures.operating_point.replicas
    found = figures.break_even_with_hidden
    # the first ones (from the replicas always kept, 2 by default), the ones around the
    # break-even and around the volume asked for
    kept = inputs.settings.min_replicas
    assert kept == 2 and min(replicas) == kept and {2, 3, 4} <= set(replicas)
    assert found is not None

    def around(n: int) -> set[int]:
        return {k for k in (n - 1, n, n + 1) if k >= kept}

    assert around(found.replicas) | around(asked) <= set(replicas)
    text = report.markdown(report.build(inputs, figures, load(None, {}, {}).sources, []))
    assert len(text.splitlines()) < 90


@pytest.mark.parametrize(
    ("volume", "capacity", "scale"),
    [
        ("20000", "2.7", "linear"),
        ("1e9", "2.7", "log"),  # a billion a day and the break-even at 180,000, both in view
        ("1e12", "0.001", "linear"),  # no break-even: only the volume asked for matters
    ],
)
def test_the_chart_draws_any_volume_from_a_bounded_number_of_points(volume, capacity, scale):
    inputs, figures = figures_at(volume, capacity)
    built = report.build(inputs, figures, load(None, {}, {}).sources, [])
    figure = chart.draw(figures, built, "request", inputs.settings.requests_per_day)
    plot = figure.axes[1]
    assert plot.get_xscale() == plot.get_yscale() == scale
    left, right = plot.get_xlim()
    assert right > float(volume)
    for found in (figures.break_even_with_hidden, figures.break_even_without_hidden):
        assert found is None or left < found.requests_per_day < right
    for line in plot.get_lines():
        assert (
            len(line.get_xdata()) <= 2 * chart.EXACT_STEPS + 4
            or len(line.get_xdata()) == chart.SAMPLES
        )


def _limit_memory() -> None:
    limit = 1 << 30  # 1 GiB of address space: the old staircase needed tens of GB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.timeout(120)
def test_the_largest_volume_accepted_finishes_in_bounded_memory(tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, "-m", "loadtest.cost", "--out", str(tmp_path), "--settings", EXAMPLE),
            *("--capacity-requests-per-s", "0.001", "--requests-per-day", "1e12"),
            *("--input-tokens-per-request", "3000", "--output-tokens-per-request", "100"),
        ],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("COST_")},
        capture_output=True,
        text=True,
        timeout=100,
        preexec_fn=_limit_memory,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "cost.png").stat().st_size > 0
    assert len(done.stdout.splitlines()) < 100


def test_the_chart_s_staircase_is_the_calculator_s_cost_at_every_point():
    """The drawn staircase is usd_per_day wherever it is drawn: with two replicas kept its first
    stretch costs two replicas (it was drawn as one), and scaled down it follows the hours."""
    option = SelfHost(4.0, 1.0, Traffic.busy_hours(8, 1.0), fixed_usd_per_day=10, min_replicas=2)
    full = option.requests_per_replica_day
    for shape in (option, replace(option, scale_down=True)):
        xs, ys = chart.staircase(shape, 0.0, 5 * full)
        for x, y in zip(xs, ys, strict=True):
            # a step's corner belongs to the stretch before or after it
            assert y in (shape.usd_per_day(x), shape.usd_per_day(x * (1 + 1e-9))), (x, y)
    assert chart.staircase(option, 0.0, 5 * full)[1][0] == 2 * 96 + 10
