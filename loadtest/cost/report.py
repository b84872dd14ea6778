"""The figures as tables (terminal and Markdown alike), JSON and an HTML page; every table is
built once and rendered three ways, so the three never disagree."""

from __future__ import annotations

import html
import math
import unicodedata
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..summary import Backend
from .calculate import Figures, Inputs, Point, Unit
from .maths import BreakEven, SelfHost
from .settings import CalculatorSettings, Source


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]


def usd(value: float) -> str:
    """Dollars as money, with the digits that matter: $86.16, $1,234, $0.00163, $0.0000646,
    $4.2 trillion; never an exponent."""
    if value < 0:
        return "−" + usd(-value)
    if value >= 1e12:
        return f"${value / 1e12:,.1f} trillion"
    if value >= 1000:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}"
    if value == 0:
        return "$0"
    # three significant digits, in as many decimals as that takes
    decimals = max(2, 2 - math.floor(math.log10(value)))
    text = f"{value:.{decimals}f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"


def _dollars(value: float) -> str:
    """A difference for one line of prose: whole dollars from $10 on."""
    return f"${value:,.0f}" if 10 <= value < 1e12 else usd(value)


def count(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def share(value: float) -> str:
    return f"{value:.0%}"


@dataclass(frozen=True)
class Report:
    """What every format shows first: the title, the banner (when the capacity is not a GPU
    measurement) and the verdict, then the tables and notes."""

    title: str
    banner: str | None
    verdict: str
    headline: list[str]  # under the verdict: API pricing, peak sizing, redundancy
    tables: list[Table]
    notes: list[str]


def _given(sources: dict[str, Source], *fields: str) -> bool:
    return any(sources[f].kind in ("file", "env", "flag") for f in fields)


def api_label(inputs: Inputs, sources: dict[str, Source]) -> str:
    """The API as priced: its model's name only while the prices are that preset's (or the
    name was set too), else the prices alone."""
    s = inputs.settings
    if s.api_blended_usd_per_million is not None:
        prices = f"{usd(s.api_blended_usd_per_million)} per 1M tokens"
        custom = True
    else:
        prices = f"{api_prices_text(s)} per 1M tokens"
        custom = _given(
            sources,
            "api_input_usd_per_million",
            "api_cached_input_usd_per_million",
            "api_output_usd_per_million",
        )
    if custom and not _given(sources, "api_model", "api_preset"):
        return f"an API at {prices}"
    return f"{s.api_model} at {prices}"


def api_prices_text(s: CalculatorSettings) -> str:
    """The API prices as "$0.25 in / $0.025 cached in / $2.00 out"; the cached price left out
    when it is the input price (nothing is billed less for being cached)."""
    cached = s.api_cached_input_usd_per_million
    shown = f" / {usd(cached)} cached in" if cached < s.api_input_usd_per_million else ""
    return f"{usd(s.api_input_usd_per_million)} in{shown} / {usd(s.api_output_usd_per_million)} out"


def cached_line(inputs: Inputs, figures: Figures) -> str:
    """How the API's input is billed, in a few words, for the verdict."""
    s = inputs.settings
    if s.api_blended_usd_per_million is not None:
        return "API priced at one blended price"
    if s.api_cached_input_usd_per_million >= s.api_input_usd_per_million:
        return "API cached input billed as input"
    return (
        f"API input {share(figures.api_cached_share)} cached at "
        f"{usd(s.api_cached_input_usd_per_million)}/1M"
    )


def redundancy(min_replicas: int) -> str:
    if min_replicas == 1:
        return "1 — no redundancy: a single point of failure (min_replicas = 1)"
    return f"at least {min_replicas} (N+1: one can fail or be upgraded while the rest serve)"


def hours_text(hours: list[int]) -> str:
    """Hours as clock ranges: [9, 10, 11, 20] → "09:00–12:00, 20:00–21:00"."""
    spans: list[list[int]] = []
    for hour in sorted(hours):
        if spans and spans[-1][1] == hour:
            spans[-1][1] = hour + 1
        else:
            spans.append([hour, hour + 1])
    return ", ".join(f"{a:02d}:00–{b % 24:02d}:00" for a, b in spans) or "none"


def pricing_line(inputs: Inputs, sources: dict[str, Source], figures: Figures) -> str:
    s, f = inputs.settings, figures
    how = (
        "set"
        if s.api_cached_share is not None
        else "measured from the load test's prompts"
        if f.api_cached_share_measured
        else "derived from the prompts' lengths"
    )
    if s.api_blended_usd_per_million is not None:
        cached = "one blended price: nothing billed less for being cached"
    elif s.api_cached_input_usd_per_million >= s.api_input_usd_per_million:
        cached = "cached input billed as input (no cached price)"
    else:
        cached = f"{share(f.api_cached_share)} of its input cached ({how})"
    return f"API pricing: {api_label(inputs, sources)}; {cached}."


def peak_line(inputs: Inputs, figures: Figures) -> str:
    """How the GPUs were sized, and the GPU time paid for, in one line."""
    s, f = inputs.settings, figures
    t, at = f.with_hidden.traffic, f.operating_point
    peak = t.peak_hour()
    bursty = f", × {s.peak_factor:g} at its busiest minutes" if s.peak_factor != 1 else ""
    other = replace(f.with_hidden, scale_down=not f.with_hidden.scale_down)
    other_hours = other.replica_hours(at.requests_per_day) * s.gpu_count
    sized = (
        f"Peak sizing: the busiest hour, {hours_text([peak])}, carries "
        f"{t.hourly_shares[peak]:.1%} of the day's {inputs.workload.unit}s "
        f"({t.peak_to_mean():.2f}× the day's mean rate{bursty}): "
        f"{count(at.requests_per_day)}/day need {at.gpus:,} GPU{'s' if at.gpus != 1 else ''} "
        "there at the SLO"
    )
    if f.with_hidden.scale_down:
        busy = [h for h in range(24) if t.busy(h)]
        return (
            f"{sized}; scaled down off-hours: {count(at.gpu_hours_per_day)} GPU-hours/day "
            f"(always on: {count(other_hours)}), KEDA keeping at least {s.min_replicas} "
            f"in {hours_text(busy)}, {s.off_hours_min_replicas} in the other hours, at most "
            f"{at.replicas}."
        )
    return (
        f"{sized}; always on: {count(at.gpu_hours_per_day)} GPU-hours/day "
        f"(scaled down off-hours: {count(other_hours)}, scaling = scale_down)."
    )


def redundancy_line(inputs: Inputs) -> str:
    n = inputs.settings.min_replicas
    if n == 1:
        return (
            "Redundancy: none — min_replicas = 1, a single point of failure: an upgrade or a "
            "failed GPU stops the service."
        )
    return (
        f"Redundancy: at least {n} replicas at any volume (N+1: one can fail or be upgraded "
        "while the rest serve), in the break-even and the staircase."
    )


def gpu_label(inputs: Inputs) -> str:
    s = inputs.settings
    return f"{s.gpu_count} × {s.gpu_name} at {usd(s.gpu_hourly_usd)}/h"


def measured_on(inputs: Inputs) -> str:
    """Where the capacity came from, as the summary recorded what served the load."""
    w = inputs.workload
    if w.summary is None or "capacity_requests_per_s" in w.given:
        return "capacity given as a setting"
    backend = w.summary.backend
    if backend is None:
        return "backend not recorded"
    if backend.simulated:
        return "capacity from the simulator, not measured"
    if backend.kind == "vllm":
        gpu = backend.gpu
        on = f", {gpu.count} × {gpu.name}" if gpu and gpu.name else ""
        return f"measured on vLLM {backend.version or '?'}{on}"
    return "backend not identified"


def title(inputs: Inputs, sources: dict[str, Source]) -> str:
    return (
        f"Self-hosted on {gpu_label(inputs)} ({measured_on(inputs)}) vs "
        f"{api_label(inputs, sources)}, per {inputs.workload.unit}"
    )


def banner(inputs: Inputs) -> str | None:
    """A warning at the top of every format when the capacity is not a GPU measurement."""
    w = inputs.workload
    if w.summary is None or "capacity_requests_per_s" in w.given:
        return None
    backend = w.summary.backend
    if backend is None:
        return (
            "BACKEND NOT RECORDED — this summary does not say what served the load (an older "
            "python -m loadtest wrote it), so its capacity may not be a GPU measurement"
        )
    if backend.simulated:
        return (
            "SIMULATED BACKEND — not a GPU measurement: the model simulator served this load, "
            "so the capacity mostly measures this machine's CPU and the load generator; measure "
            "on the GPU host before deciding"
        )
    if backend.kind != "vllm":
        why = "; ".join(backend.notes) or "no vLLM answered"
        return f"BACKEND NOT IDENTIFIED — {why}: the capacity is not shown to be a GPU measurement"
    return None


def verdict(inputs: Inputs, figures: Figures) -> str:
    """The answer in one line: which option is cheaper at the volume, and from where
    self-hosting wins."""
    unit, f = inputs.workload.unit, figures
    at = f.operating_point
    where = f"At {count(at.requests_per_day)} {unit}s/day"
    if not f.operating_point_is_setting:
        where += " (one replica at its fullest; set requests_per_day for your volume)"
    difference = at.api_usd_per_day - at.self_host_usd_per_day
    if abs(difference) < 0.005:
        cheaper = "both cost the same"
    elif difference < 0:
        cheaper = f"the API is {_dollars(-difference)}/day cheaper"
    else:
        cheaper = f"self-hosting is {_dollars(difference)}/day cheaper"
    found = f.break_even_with_hidden
    if found is None:
        wins = "self-hosting never wins: one replica full at every peak costs more than the API"
    else:
        wins = f"self-hosting wins from {count(found.requests_per_day)}/day"
        if found.cheaper_from_requests_per_day > found.requests_per_day * (1 + 1e-9):
            wins += f" and at every volume from {count(found.cheaper_from_requests_per_day)}/day"
    hidden = sum(f.hidden_usd_per_day.values())
    counted = (
        f"hidden costs of {_dollars(hidden)}/day included"
        if hidden
        else "no hidden costs counted: ops, retraining and storage are $0"
    )
    return f"{where} {cheaper}; {wins} ({counted}; {cached_line(inputs, figures)})."


def build(inputs: Inputs, figures: Figures, sources: dict[str, Source], notes: list[str]) -> Report:
    parts = tables(inputs, figures)
    parts.append(assumptions(inputs, figures, sources))
    headline = [
        pricing_line(inputs, sources, figures),
        peak_line(inputs, figures),
        redundancy_line(inputs),
    ]
    return Report(
        title(inputs, sources), banner(inputs), verdict(inputs, figures), headline, parts, notes
    )


def _break_even_row(name: str, found: BreakEven | None, gpus_per_replica: int) -> list[str]:
    if found is None:
        return [name, "never", "—", "—", "—"]
    return [
        name,
        count(found.requests_per_day),
        f"{found.replicas * gpus_per_replica:,}",
        usd(found.usd_per_day),
        count(found.cheaper_from_requests_per_day),
    ]


def tables(inputs: Inputs, figures: Figures) -> list[Table]:
    s, w, p, f = inputs.settings, inputs.workload, inputs.prompts, figures
    at = f.operating_point
    volume = f"at {count(at.requests_per_day)} {w.unit}s/day"
    extra = (
        f" (+{count(p.extra_per_call)} × {w.model_calls:.3g} calls: longer prompt)"
        if p.extra_per_call
        else ""
    )
    per_request = Table(
        f"Per {w.unit}",
        ["figure", "self-hosted", f"API ({s.api_model})"],
        [
            ["input tokens", count(w.input_tokens), count(f.api_input_tokens) + extra],
            [
                "of which cached input (repeated prefix, at the cached price)",
                "— (GPU time, not billed per token)",
                f"{count(f.api_cached_input_tokens)} ({share(f.api_cached_share)})",
            ],
            ["output tokens", count(w.output_tokens), count(f.api_output_tokens)],
            [
                f"$ per {w.unit}, replica busy every paid hour (GPU only)",
                usd(f.self_host_usd_per_request_at_capacity),
                usd(f.api_usd_per_request),
            ],
            [
                f"$ per {w.unit} {volume} (all costs)",
                usd(at.self_host_usd_per_request),
                usd(f.api_usd_per_request),
            ],
            [
                "$ per 1M tokens (in + out), replica busy every paid hour",
                usd(f.self_host_usd_per_million_tokens_at_capacity),
                usd(f.api_usd_per_million_tokens),
            ],
            [
                f"$ per 1M tokens (in + out) {volume}",
                usd(at.self_host_usd_per_million_tokens),
                usd(f.api_usd_per_million_tokens),
            ],
            [
                f"$ per day {volume}",
                f"{usd(at.self_host_usd_per_day)} ({at.gpus:,} GPU at the peak, "
                f"{count(at.gpu_hours_per_day)} GPU-hours, {share(at.utilisation)} utilised)",
                usd(at.api_usd_per_day),
            ],
        ],
    )
    hidden_total = sum(f.hidden_usd_per_day.values())
    break_even = Table(
        f"Break-even ({w.unit}s/day at which both cost the same)",
        ["view", f"{w.unit}s/day", "GPUs", "$/day each", "self-hosting never dearer from"],
        [
            _break_even_row(
                "without hidden costs: every paid GPU hour busy, GPU time only",
                f.break_even_without_hidden,
                s.gpu_count,
            ),
            _break_even_row(
                f"with hidden costs: the daily profile (peak "
                f"{f.with_hidden.traffic.peak_to_mean():.2f}× the mean), "
                f"{s.scaling.replace('_', ' ')}, at least {s.min_replicas} replica"
                f"{'s' if s.min_replicas > 1 else ''}, fixed "
                + (f"{usd(hidden_total)}/day" if hidden_total else "costs none set ($0)"),
                f.break_even_with_hidden,
                s.gpu_count,
            ),
        ],
    )
    marked = [(x, "") for x in f.staircase]
    if f.operating_point_is_setting:
        marked.append((at, "  ← requests_per_day"))
    marked.sort(key=lambda pair: pair[0].requests_per_day)
    rows: list[list[str]] = []
    for i, (x, mark) in enumerate(marked):
        previous = [p for p, m in marked[:i] if not m]
        if not mark and previous and x.replicas > previous[-1].replicas + 1:
            rows.append(["…", "", "", "", "", "", ""])  # replica counts that decide nothing
        rows.append(_stair_row(x, mark))
    staircase = Table(
        "Daily cost in whole GPUs (with hidden costs; each row: the most that many GPUs serve, "
        "around the volumes that matter)",
        [
            f"{w.unit}s/day",
            "GPUs at the peak",
            "GPU-hours/day",
            "utilisation",
            "self-host $/day",
            "API $/day",
            "cheaper",
        ],
        rows,
    )
    step = share(s.sensitivity_step)
    sensitivity = Table(
        f"Sensitivity: break-even with hidden costs when one input moves ±{step}",
        ["input", f"−{step}", f"→ {w.unit}s/day", f"+{step}", f"→ {w.unit}s/day"],
        [
            [
                x.name,
                _input_value(x.unit, x.low),
                _maybe(x.break_even_low),
                _input_value(x.unit, x.high),
                _maybe(x.break_even_high),
            ]
            for x in f.sensitivity
        ],
    )
    return [per_request, break_even, staircase, sensitivity]


def _stair_row(x: Point, mark: str) -> list[str]:
    cheaper = "self-host" if x.self_host_usd_per_day < x.api_usd_per_day else "API"
    return [
        count(x.requests_per_day) + mark,
        f"{x.gpus:,}",
        count(x.gpu_hours_per_day),
        share(x.utilisation),
        usd(x.self_host_usd_per_day),
        usd(x.api_usd_per_day),
        cheaper,
    ]


def _maybe(value: float | None) -> str:
    return "never" if value is None else count(value)


def _input_value(unit: Unit, value: float) -> str:
    if unit in (Unit.USD_PER_HOUR, Unit.USD_PER_REQUEST, Unit.USD_PER_DAY):
        return usd(value) + unit.removeprefix("usd")
    if unit is Unit.PER_SECOND:
        return f"{value:.3g}/s"
    if unit is Unit.HOURS:
        return f"{value:g} h"
    if unit is Unit.FACTOR:
        return f"{value:.2f}×"
    if unit is Unit.SHARE:
        return share(value)
    return count(value)


def assumptions(inputs: Inputs, figures: Figures, sources: dict[str, Source]) -> Table:
    """Every number the result depends on, with where it came from."""
    s, w, p, f = inputs.settings, inputs.workload, inputs.prompts, figures

    def src(*fields: str) -> str:
        origins = dict.fromkeys(sources[x].origin for x in fields)
        return "; ".join(origins)

    peak = f.with_hidden.traffic.peak_to_mean()
    rows: list[list[str]] = []
    if w.summary is not None:
        slo = w.summary.slo
        limits = ", ".join(
            f"{name} ≤ {value:g} ms"
            for name, value in (
                ("TTFT p99", slo.ttft_p99_ms),
                ("ITL p99", slo.itl_p99_ms),
                ("run p95", slo.run_p95_ms),
            )
        )
        rows.append(
            [
                "load test",
                f"step {w.summary.step} ({w.summary.users} users), the highest that met "
                f"the SLO ({limits or 'not recorded'})",
                w.summary.path,
            ]
        )
        rows.append(["what served the load", *_backend_cells(w.summary.backend)])
    rows += [
        [
            "capacity per replica at the SLO",
            f"{w.capacity_per_s:.4g} {w.unit}s/s",
            w.sources["capacity_per_s"],
        ],
        ["input tokens per request (fine-tune)", count(w.input_tokens), w.sources["input_tokens"]],
        ["output tokens per request", count(w.output_tokens), w.sources["output_tokens"]],
        ["model calls per request", f"{w.model_calls:g}", w.sources["model_calls"]],
        [
            "fine-tune system prompt",
            f"{count(p.finetune)} tokens",
            "the loop's default (LOOP_SYSTEM_PROMPT), counted by common.tokens",
        ],
        [
            "API system prompt",
            f"{count(p.api)} tokens (+{count(p.extra_per_call)} per call)",
            f"{p.api_file}, counted by common.tokens" if p.api_file else "the fine-tune's own",
        ],
        [
            "GPU",
            f"{s.gpu_name}, {usd(s.gpu_hourly_usd)}/h × {s.gpu_count} per replica",
            src("gpu_name", "gpu_hourly_usd", "gpu_count"),
        ],
        ["replicas kept running", redundancy(s.min_replicas), src("min_replicas")],
        [
            "scaling",
            "always on: every hour runs the peak hour's replicas"
            if s.scaling == "always_on"
            else f"scaled down: each hour runs its own peak's replicas, at least "
            f"{s.min_replicas} in the working hours, {s.off_hours_min_replicas} in the others",
            src("scaling", "off_hours_min_replicas"),
        ],
        [
            "daily profile (% of the day's requests by hour from 00:00)",
            " ".join(f"{x:g}" for x in s.daily_profile)
            + f" — peak {hours_text([f.with_hidden.traffic.peak_hour()])}, "
            f"{peak:.2f}× the mean with peak factor {s.peak_factor:g}",
            src("traffic_profile", "daily_profile", "peak_factor"),
        ],
        [
            "one replica serves a day",
            f"{count(f.with_hidden.requests_per_replica_day)} {w.unit}s with the daily profile, "
            f"{count(f.without_hidden.requests_per_replica_day)} if spread evenly",
            "capacity × 3600 s ÷ the peak hour's share of the day",
        ],
        [
            "ops labour",
            (
                f"{s.ops_hours_per_month:g} h/month × {usd(s.ops_usd_per_hour)}/h = "
                if s.ops_hours_per_month
                else ""
            )
            + f"{usd(s.ops_usd_per_month)}/month = {usd(f.hidden_usd_per_day['ops labour'])}/day",
            src("ops_usd_per_month"),
        ],
        [
            "retraining",
            f"{usd(s.retraining_usd)} every {s.retraining_every_days:g} days = "
            f"{usd(f.hidden_usd_per_day['retraining'])}/day",
            src("retraining_usd", "retraining_every_days"),
        ],
        [
            "storage and egress",
            f"{usd(s.storage_egress_usd_per_month)}/month = "
            f"{usd(f.hidden_usd_per_day['storage and egress'])}/day",
            src("storage_egress_usd_per_month"),
        ],
    ]
    if s.api_blended_usd_per_million is not None:
        prices = f"{usd(s.api_blended_usd_per_million)} per 1M tokens, in and out alike"
        where = src("api_blended_usd_per_million")
    else:
        prices = (
            f"{usd(s.api_input_usd_per_million)} in / {usd(s.api_output_usd_per_million)} out "
            "per 1M tokens"
        )
        where = src("api_input_usd_per_million", "api_output_usd_per_million")
    rows.append([f"API {s.api_model}", prices, where])
    if s.api_blended_usd_per_million is None:
        rows.append(
            [
                "API cached input",
                f"{usd(s.api_cached_input_usd_per_million)} per 1M tokens",
                src("api_cached_input_usd_per_million"),
            ]
        )
    rows.append(
        [
            "cached share of API input",
            f"{share(f.api_cached_share)} ({f.api_cached_share_how})",
            src("api_cached_share")
            if s.api_cached_share is not None
            else f"measured: the prompt records of {w.summary.path if w.summary else '?'}"
            if f.api_cached_share_measured
            else "derived: the prompts' token counts (common.tokens); "
            f"{w.sources['input_tokens']}; {w.sources['model_calls']}",
        ]
    )
    hit_rate = w.summary.prefix_cache_hit_rate if w.summary else None
    if hit_rate is not None:
        rows.append(
            [
                "vLLM prefix-cache hit rate (the fine-tune's own)",
                f"{share(hit_rate)} of the prompt tokens in the capacity step",
                "summary.json: vllm:prefix_cache_hits_total ÷ vllm:prefix_cache_queries_total "
                "via Prometheus",
            ]
        )
    if s.requests_per_day is not None:
        rows.append(
            ["expected volume", f"{count(s.requests_per_day)}/day", src("requests_per_day")]
        )
    rows.append(["month", "365 / 12 days", "calendar average"])
    return Table("Assumptions", ["assumption", "value", "source"], rows)


def _backend_cells(backend: Backend | None) -> list[str]:
    """(what served the load, how that is known), from the summary's `backend` block."""
    if backend is None:
        return ["not recorded", "the summary has no backend block"]
    kind = {"simulator": "the model simulator", "vllm": "vLLM"}.get(backend.kind, "unknown")
    parts = [f"{kind} {backend.version or ''}".strip()]
    if backend.models:
        parts.append("serving " + ", ".join(backend.models))
    gpu = backend.gpu
    if gpu and gpu.name:
        # the simulator's DCGM stand-in already names its GPU "… (simulated)"
        made_up = " (simulated)" if gpu.simulated and "(simulated)" not in gpu.name else ""
        parts.append(f"{gpu.count} × {gpu.name}{made_up}")
    else:
        parts.append("no GPU reported")
    return [", ".join(parts), "; ".join(backend.sources) or "—"]


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def markdown(report: Report) -> str:
    """Pipe tables padded to line up in a terminal; the same text is valid Markdown."""
    lines = [f"# {report.title}", ""]
    if report.banner:
        lines += [f"> **{report.banner}**", ""]
    lines += [f"**{report.verdict}**", ""]
    lines += [*[f"- {line}" for line in report.headline], ""]
    notes = report.notes
    for table in report.tables:
        widths = [
            max(_width(row[i]) for row in [table.header, *table.rows])
            for i in range(len(table.header))
        ]

        def line(cells: list[str], widths: list[int] = widths) -> str:
            padded = [c + " " * (w - _width(c)) for c, w in zip(cells, widths, strict=True)]
            return "| " + " | ".join(padded) + " |"

        lines += [f"## {table.title}", "", line(table.header)]
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        lines += [line(row) for row in table.rows]
        lines.append("")
    if notes:
        lines += ["## Notes", "", *[f"- {note}" for note in notes], ""]
    return "\n".join(lines)


def page(report: Report, svg: str) -> str:
    """One self-contained HTML file: the banner and verdict, the chart inline, then the same
    tables."""
    heading, notes = report.title, report.notes
    body = [f"<h1>{html.escape(heading)}</h1>"]
    if report.banner:
        body.append(f'<p class="banner" role="alert">{html.escape(report.banner)}</p>')
    body.append(f'<p class="verdict">{html.escape(report.verdict)}</p>')
    items = "".join(f"<li>{html.escape(line)}</li>" for line in report.headline)
    body.append(f'<ul class="headline">{items}</ul>')
    body.append(f'<figure class="chart">{svg}</figure>')
    for table in report.tables:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in table.header)
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in table.rows
        )
        body.append(
            f"<h2>{html.escape(table.title)}</h2>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        body.append(f"<h2>Notes</h2><ul>{items}</ul>")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(heading)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;"
    "padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f3f3f3}"
    "figure.chart{margin:0}figure.chart svg{width:100%;height:auto}"
    ".banner{background:#fdecea;border:2px solid #c0392b;color:#922b21;font-weight:bold;"
    "padding:.6em .8em}.verdict{font-size:1.15em;font-weight:bold}"
)


def _self_host_json(option: SelfHost) -> dict[str, Any]:
    return {
        **asdict(option),
        "replica_usd_per_day": option.replica_usd_per_day,
        "requests_per_replica_day": option.requests_per_replica_day,
        "peak_to_mean": option.traffic.peak_to_mean(),
    }


def as_json(
    inputs: Inputs, figures: Figures, sources: dict[str, Source], report: Report
) -> dict[str, Any]:
    f, notes = figures, report.notes
    return {
        "title": report.title,
        "banner": report.banner,
        "verdict": report.verdict,
        "headline": report.headline,
        "unit": inputs.workload.unit,
        "summary": None if inputs.workload.summary is None else inputs.workload.summary.as_json(),
        "settings": {
            name: {"value": value, "source": sources[name].origin}
            for name, value in inputs.settings.model_dump().items()
        },
        "workload": asdict(inputs.workload)
        | {"summary": None, "given": sorted(inputs.workload.given)},
        "prompts": asdict(inputs.prompts) | {"extra_per_call": inputs.prompts.extra_per_call},
        "api": {
            "input_tokens_per_request": f.api_input_tokens,
            "cached_input_tokens_per_request": f.api_cached_input_tokens,
            "cached_share": f.api_cached_share,
            "cached_share_how": f.api_cached_share_how,
            "output_tokens_per_request": f.api_output_tokens,
            "usd_per_request": f.api_usd_per_request,
            "usd_per_million_tokens": f.api_usd_per_million_tokens,
        },
        "self_host": {
            "usd_per_request_at_capacity": f.self_host_usd_per_request_at_capacity,
            "usd_per_million_tokens_at_capacity": f.self_host_usd_per_million_tokens_at_capacity,
            "hidden_usd_per_day": f.hidden_usd_per_day,
            "with_hidden_costs": _self_host_json(f.with_hidden),
            "without_hidden_costs": _self_host_json(f.without_hidden),
        },
        "break_even": {
            "with_hidden_costs": _maybe_dict(f.break_even_with_hidden),
            "without_hidden_costs": _maybe_dict(f.break_even_without_hidden),
        },
        "operating_point": asdict(f.operating_point)
        | {"from_setting": f.operating_point_is_setting},
        "staircase": [asdict(x) for x in f.staircase],
        "sensitivity": {
            "step": inputs.settings.sensitivity_step,
            "break_even_with_hidden_costs": [asdict(x) for x in f.sensitivity],
        },
        "notes": notes,
    }


def _maybe_dict(found: BreakEven | None) -> dict[str, Any] | None:
    return None if found is None else asdict(found)
