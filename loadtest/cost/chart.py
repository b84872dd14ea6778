"""Daily cost vs requests/day: both self-hosted staircases, the API's line, the break-evens and
the volume asked for, under the report's banner and verdict.

matplotlib is imported here only (it is in the loadtest extra, not in the services' image), with
the Agg backend through Figure objects: no display, no pyplot global state.

The axes show where the decision is: linear while the break-evens and the volume asked for are
within a factor of 25 of each other, else logarithmic on both axes, so that a billion requests
a day and a break-even at 70,000 are both on the chart. A staircase of thousands of replicas
is drawn from a bounded number of points (its steps are narrower than a pixel there).
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .calculate import Figures
from .maths import SelfHost
from .report import Report, usd

SELF_HOST_COLOUR = "#c0392b"
BARE_COLOUR = "#e59866"
API_COLOUR = "#2471a3"
VOLUME_COLOUR = "#444444"
BANNER_COLOUR = "#b03a2e"
LOG_SPREAD = 25  # the volumes that matter further apart than this: logarithmic axes
EXACT_STEPS = 400  # a staircase of more steps than this is drawn from samples
SAMPLES = 1200
WRAP = 112  # characters per line of the header at its font size, 11 inches wide


def _marks(figures: Figures, requests_per_day: float | None) -> list[tuple[float, str, str]]:
    """(volume, label, colour) of every vertical line: the break-evens, where self-hosting
    stops ever being dearer, and the volume asked for."""
    marks = []
    for found, colour, name in (
        (figures.break_even_with_hidden, SELF_HOST_COLOUR, "break-even with hidden costs"),
        (figures.break_even_without_hidden, BARE_COLOUR, "break-even, GPU time only"),
    ):
        if found is None:
            continue
        marks.append((found.requests_per_day, f"{name}: {found.requests_per_day:,.0f}", colour))
        if found.cheaper_from_requests_per_day > found.requests_per_day * (1 + 1e-9):
            marks.append(
                (
                    found.cheaper_from_requests_per_day,
                    f"never dearer from {found.cheaper_from_requests_per_day:,.0f}",
                    colour,
                )
            )
    if requests_per_day is not None:
        marks.append((requests_per_day, f"asked for: {requests_per_day:,.0f}", VOLUME_COLOUR))
    return marks


def x_range(figures: Figures, requests_per_day: float | None) -> tuple[float, float, bool]:
    """(left, right, logarithmic) of the x axis: every mark on it, with room around."""
    one_replica = figures.with_hidden.requests_per_replica_day
    volumes = [x for x, _, _ in _marks(figures, requests_per_day)] or [one_replica]
    low, high = min(volumes), max(volumes)
    if high / low > LOG_SPREAD:
        return low / 3, high * 3, True
    right = 1.3 * high
    if one_replica < 4 * high:  # the first step's edge too, when it is near
        right = max(right, 1.1 * one_replica)
    return 0.0, right, False


def staircase(option: SelfHost, left: float, right: float) -> tuple[list[float], list[float]]:
    """The self-host cost on [left, right] as (xs, ys) of a step line: n replicas cost n·g + h
    on (n − 1)·c … n·c. Exact while there are few steps, else sampled (evenly on a log axis
    when left > 0), so a billion requests a day cost no more points than a thousand."""
    c = option.requests_per_replica_day
    first = max(1, math.floor(left / c) + 1)
    last = max(first, math.ceil(right / c))
    # scaled down, every hour steps on its own: sampled
    if last - first <= EXACT_STEPS and not option.scale_down:
        xs: list[float] = [left]
        ys: list[float] = []
        for n in range(first, last + 1):
            end = min(n * c, right)
            cost = option.usd_per_day(end)  # the stretch's: min_replicas hold the first ones
            if ys:
                xs.append(xs[-1])
            ys += [cost, cost]
            xs.append(end)
        return xs, ys
    if left > 0:
        ratio = (right / left) ** (1 / (SAMPLES - 1))
        xs = [left * ratio**k for k in range(SAMPLES)]
    else:
        xs = [right * k / (SAMPLES - 1) for k in range(SAMPLES)]
    return xs, [option.usd_per_day(x) for x in xs]


def _short(value: float, prefix: str = "") -> str:
    for size, name in ((1e12, "tn"), (1e9, "bn"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{prefix}{value / size:,.3g}{name}"
    return f"{prefix}{value:,.3g}"


def _header(fig: Figure, axes: Axes, report: Report) -> None:
    """The banner (red, when the capacity is not a GPU measurement), title, verdict and the
    lines under it (pricing, peak sizing, redundancy)."""
    axes.axis("off")
    lines: list[tuple[str, dict[str, object]]] = []
    if report.banner:
        style = {"color": BANNER_COLOUR, "fontweight": "bold", "fontsize": 10.5}
        lines += [(line, style) for line in textwrap.wrap(report.banner, WRAP)]
    lines += [(line, {"fontsize": 10.5}) for line in textwrap.wrap(report.title, WRAP)]
    verdict = {"fontweight": "bold", "fontsize": 10.5, "color": "#1b2631"}
    lines += [(line, verdict) for line in textwrap.wrap(report.verdict, WRAP)]
    for said in report.headline:
        lines += [(line, {"fontsize": 9.5}) for line in textwrap.wrap(said, WRAP)]
    step = 1 / max(len(lines), 1)
    for i, (line, style) in enumerate(lines):
        # parse_math=False: two "$" in one line are money, not a TeX formula
        text = axes.text(
            0, 1 - (i + 0.5) * step, line, va="center", ha="left", parse_math=False,
            **style,  # type: ignore[arg-type]
        )  # fmt: skip
        text.set_in_layout(False)  # wrapped to fit: the plot keeps the figure's width


def draw(figures: Figures, report: Report, unit: str, requests_per_day: float | None) -> Figure:
    left, right, log = x_range(figures, requests_per_day)
    header_lines = (
        len(textwrap.wrap(report.banner or "", WRAP))
        + len(textwrap.wrap(report.title, WRAP))
        + len(textwrap.wrap(report.verdict, WRAP))
        + sum(len(textwrap.wrap(said, WRAP)) for said in report.headline)
    )
    header = 0.22 * header_lines + 0.1
    fig = Figure(figsize=(11, 6.2 + header), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    top, ax = fig.subplots(2, 1, height_ratios=[header, 6.2])
    _header(fig, top, report)

    xs, ys = staircase(figures.with_hidden, left, right)
    ax.plot(xs, ys, color=SELF_HOST_COLOUR, lw=2.2, label="self-hosted, with hidden costs")
    xs, ys = staircase(figures.without_hidden, left, right)
    ax.plot(
        xs, ys, color=BARE_COLOUR, lw=1.6, ls="--", label="self-hosted, GPU time only (seed view)"
    )
    api = figures.api_usd_per_request
    ax.plot(
        [left, right],
        [left * api, right * api],
        color=API_COLOUR,
        lw=2.2,
        label=f"API, {usd(api)} per {unit}",
    )
    for found, colour in (
        (figures.break_even_with_hidden, SELF_HOST_COLOUR),
        (figures.break_even_without_hidden, BARE_COLOUR),
    ):
        if found is not None:
            ax.plot([found.requests_per_day], [found.usd_per_day], "o", color=colour, ms=8)
    if figures.break_even_with_hidden is None:
        ax.text(
            0.5,
            0.6,
            "no break-even with hidden costs: the API is cheaper at any volume",
            transform=ax.transAxes,
            ha="center",
            color=SELF_HOST_COLOUR,
        )
    ax.set_xlim(left, right)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        costs = [figures.with_hidden.usd_per_day(left), left * api, right * api]
        costs = [c for c in costs if c > 0] or [1.0]
        ax.set_ylim(min(costs) / 2, max(*costs, figures.with_hidden.usd_per_day(right)) * 2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v, "$")))
    else:
        ax.set_ylim(0, None)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:,.0f}"))
    # Each mark: a vertical line, its label near the top of the plot (staggered so that close
    # ones do not overlap; left of its line in the plot's right third), never down among the
    # tick labels.
    marks = sorted(_marks(figures, requests_per_day))
    for i, (x, label, colour) in enumerate(marks):
        ax.axvline(x, color=colour, lw=1.2, ls="-." if colour == VOLUME_COLOUR else ":")
        where = (math.log(x / left) / math.log(right / left)) if log else x / right
        flip = where > 0.7
        ax.annotate(
            label,
            (x, 0.97 - 0.075 * (i % 4)),
            xycoords=ax.get_xaxis_transform(),
            xytext=(-4 if flip else 4, 0),
            textcoords="offset points",
            ha="right" if flip else "left",
            va="top",
            fontsize=8.5,
            color=colour,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": colour, "alpha": 0.92},
        )
    scale = " (logarithmic)" if log else ""
    ax.set_xlabel(f"{unit}s per day{scale}")
    ax.set_ylabel(f"cost per day (USD){scale}")
    ax.grid(True, alpha=0.3)
    # below the plot, where it hides neither a line nor a label
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=9, frameon=False)
    return fig


def write_png(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="png")


def svg(fig: Figure) -> str:
    """The chart as inline SVG for the HTML page (text kept as text, stable element ids)."""
    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "cost"}):
        fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]
