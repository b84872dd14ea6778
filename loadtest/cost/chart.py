"""Daily cost vs requests/day: both self-hosted staircases, the API's line, the break-evens.

matplotlib is imported here only (it is in the loadtest extra, not in the services' image), with
the Agg backend through Figure objects: no display, no pyplot global state.
"""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from .calculate import Figures
from .maths import SelfHost

SELF_HOST_COLOUR = "#c0392b"
BARE_COLOUR = "#e59866"
API_COLOUR = "#2471a3"


def _x_max(figures: Figures, requests_per_day: float | None) -> float:
    """Far enough to show the break-evens and a few steps of the staircase."""
    candidates = [3 * figures.with_hidden.requests_per_replica_day]
    for found in (figures.break_even_with_hidden, figures.break_even_without_hidden):
        if found is not None:
            candidates.append(1.6 * found.cheaper_from_requests_per_day)
    if requests_per_day is not None:
        candidates.append(1.3 * requests_per_day)
    return max(candidates)


def _staircase(option: SelfHost, x_max: float) -> tuple[list[float], list[float]]:
    """The exact steps: n replicas cost n·g + h on (n − 1)·c … n·c."""
    c = option.requests_per_replica_day
    xs: list[float] = [0.0]
    ys: list[float] = []
    n = 1
    while True:
        cost = n * option.replica_usd_per_day + option.fixed_usd_per_day
        end = min(n * c, x_max)
        if ys:
            xs.append(xs[-1])
        ys += [cost, cost]
        xs.append(end)
        if end >= x_max:
            return xs, ys
        n += 1


def draw(figures: Figures, title: str, unit: str, requests_per_day: float | None) -> Figure:
    x_max = _x_max(figures, requests_per_day)
    fig = Figure(figsize=(11, 6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs, ys = _staircase(figures.with_hidden, x_max)
    ax.plot(xs, ys, color=SELF_HOST_COLOUR, lw=2.2, label="self-hosted, with hidden costs")
    xs, ys = _staircase(figures.without_hidden, x_max)
    ax.plot(
        xs, ys, color=BARE_COLOUR, lw=1.6, ls="--", label="self-hosted, GPU time only (seed view)"
    )
    ax.plot(
        [0, x_max],
        [0, x_max * figures.api_usd_per_request],
        color=API_COLOUR,
        lw=2.2,
        label=f"API, ${figures.api_usd_per_request:.3g} per {unit}",
    )
    for found, colour, name in (
        (figures.break_even_with_hidden, SELF_HOST_COLOUR, "break-even with hidden costs"),
        (figures.break_even_without_hidden, BARE_COLOUR, "break-even, GPU time only"),
    ):
        if found is None:
            continue
        ax.axvline(found.requests_per_day, color=colour, lw=1, ls=":")
        if found.cheaper_from_requests_per_day > found.requests_per_day * (1 + 1e-9):
            # past the staircase's last window the API never wins again
            ax.annotate(
                f"self-hosting never dearer from\n{found.cheaper_from_requests_per_day:,.0f}",
                (found.cheaper_from_requests_per_day, 0),
                xytext=(0, 18),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                color=colour,
                arrowprops={"arrowstyle": "->", "color": colour},
            )
        ax.plot([found.requests_per_day], [found.usd_per_day], "o", color=colour, ms=8)
        ax.annotate(
            f"{name}\n{found.requests_per_day:,.0f} {unit}s/day, ${found.usd_per_day:,.0f}/day",
            (found.requests_per_day, found.usd_per_day),
            xytext=(10, -34 if colour == BARE_COLOUR else 14),
            textcoords="offset points",
            fontsize=9,
            color=colour,
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": colour, "alpha": 0.9},
        )
    if requests_per_day is not None:
        ax.axvline(
            requests_per_day,
            color="#555",
            lw=1,
            ls="-.",
            label=f"expected volume, {requests_per_day:,.0f} {unit}s/day",
        )
    if figures.break_even_with_hidden is None:
        ax.text(
            0.5,
            0.93,
            "no break-even with hidden costs: the API is cheaper at any volume",
            transform=ax.transAxes,
            ha="center",
            color=SELF_HOST_COLOUR,
        )
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, None)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:,.0f}"))
    ax.set_xlabel(f"{unit}s per day")
    ax.set_ylabel("cost per day (USD)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
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
