"""`python -m loadtest.cost [SUMMARY]`: self-hosted vs API cost and break-even.

SUMMARY is a load test's summary.json (default: the newest under LOAD_RESULTS_DIR, unless
capacity and tokens per request are all given as settings). Settings come from --settings (a
TOML file), then COST_* variables, then flags, each winning over the one before; presets fill
what none of them sets. Writes cost.json, cost.md, cost.png and cost.html next to the summary
(or into --out) and prints the tables. A bad setting ends it with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from common.entrypoint import exit_on_startup_error

from ..settings import LoadSettings
from . import chart, report
from .calculate import Figures, Inputs, calculate
from .inputs import measured_gpu_count, newest_summary, prompt_tokens, workload
from .presets import API_PRESETS, GPU_PRESETS, TRAFFIC_PROFILES
from .settings import (
    CAPACITY_BASES,
    FIELDS,
    CalculatorSettings,
    Loaded,
    SettingError,
    flag_name,
    load,
)

OUTPUTS = ("cost.json", "cost.md", "cost.png", "cost.html")
# The inherited price settings carry no description of their own.
HELP = {
    "api_input_usd_per_million": "API price per 1M input tokens.",
    "api_output_usd_per_million": "API price per 1M output tokens.",
}


CHOICES = {
    "gpu_preset": tuple(GPU_PRESETS),
    "api_preset": tuple(API_PRESETS),
    "traffic_profile": tuple(TRAFFIC_PROFILES),
    "capacity_basis": CAPACITY_BASES,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line and exit status 2 like any other bad setting, not argparse's usage block
        raise SettingError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m loadtest.cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("summary", nargs="?", metavar="SUMMARY", help="a load test's summary.json")
    p.add_argument("--settings", type=Path, metavar="FILE", help="settings file (TOML)")
    p.add_argument("--out", type=Path, metavar="DIR", help="folder for the results")
    group = p.add_argument_group("settings (each also a COST_<NAME> variable)")
    for name, field in CalculatorSettings.model_fields.items():
        known = CHOICES.get(name)
        text = field.description or HELP.get(name, "")
        if known:
            text += f" Choices: {', '.join(known)}."
        default = (
            "none"
            if field.default is None
            else f"{field.default:g}"
            if isinstance(field.default, float)
            else str(field.default)
        )
        group.add_argument(
            flag_name(name),
            dest=f"set_{name}",
            metavar="VALUE",
            # argparse reads % as a format: the descriptions hold none, the defaults may
            help=f"{text} Default: {default or '(empty)'}.".replace("%", "%%"),
        )
    return p


def summary_path(given: str | None, loaded: Loaded) -> Path | None:
    if given:
        return Path(given)
    s = loaded.settings
    explicit = (s.capacity_requests_per_s, s.input_tokens_per_request, s.output_tokens_per_request)
    if all(value is not None for value in explicit):
        return None  # every measured figure was given: no load test needed
    results = Path(
        os.environ.get("LOAD_RESULTS_DIR", LoadSettings.model_fields["results_dir"].default)
    )
    found = newest_summary(results)
    if found is None:
        raise SettingError(
            f"SUMMARY: none given and no */summary.json under {results} (run `make load` "
            "first, or set capacity_requests_per_s and the tokens per request)"
        )
    return found


def notes(inputs: Inputs, figures: Figures) -> list[str]:
    found = figures.break_even_with_hidden
    unit = inputs.workload.unit
    said = list(inputs.workload.warnings)
    if found is None:
        said.append(
            "with hidden costs there is no break-even: the GPU time each request needs at the "
            f"peak hour's sizing costs more than the API charges for the same {unit}s"
        )
    elif found.cheaper_from_requests_per_day > found.requests_per_day * (1 + 1e-9):
        said.append(
            f"each extra GPU costs a whole GPU-day, so just past a full replica the API is "
            f"cheaper again for a while; self-hosting is never dearer from "
            f"{found.cheaper_from_requests_per_day:,.0f} {unit}s/day"
        )
    facts = inputs.workload.summary
    if (
        facts is not None
        and unit == "agent run"
        and facts.prompt_prefix is None
        and inputs.settings.api_cached_share is None
    ):
        said.append(
            "the summary has no prompt records (an older python -m loadtest wrote it): the "
            "API's cached share is derived from the prompts' lengths, not measured; run the "
            "load test again to measure it, or set api_cached_share"
        )
    if inputs.prompts.extra_per_call < 0:
        said.append("the API system prompt is shorter than the fine-tune's")
    said.append(
        "token counts come from the stack's stand-in tokenizer (common/tokens.py), the same "
        "one that counts the load test's tokens; the API model's own tokenizer will differ"
    )
    return said


@exit_on_startup_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    flags = {name: value for name in FIELDS if (value := getattr(args, f"set_{name}")) is not None}
    loaded = load(args.settings, os.environ, flags)
    summary = summary_path(args.summary, loaded)
    measured = workload(summary, loaded)
    loaded = measured_gpu_count(loaded, measured)
    inputs = Inputs(loaded.settings, measured, prompt_tokens(loaded))
    figures = calculate(inputs)
    said = notes(inputs, figures)
    built = report.build(inputs, figures, loaded.sources, said)
    text = report.markdown(built)

    out = args.out or (
        summary.parent if summary else Path("var") / f"cost-{dt.datetime.now():%Y%m%d-%H%M%S}"
    )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SettingError(f"--out: cannot create {out}: {error.strerror}") from None
    document = report.as_json(inputs, figures, loaded.sources, built)
    (out / "cost.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    (out / "cost.md").write_text(text)
    figure = chart.draw(figures, built, inputs.workload.unit, inputs.settings.requests_per_day)
    chart.write_png(figure, out / "cost.png")
    (out / "cost.html").write_text(report.page(built, chart.svg(figure)))
    print(text)
    print(f"wrote {', '.join(str(out / name) for name in OUTPUTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
