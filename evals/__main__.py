"""`python -m evals` (`make eval`): the release gate for a fine-tune.

Runs the scenario suite (evals/scenarios.py, and a site's own files: --scenarios site.toml)
against a model endpoint through the real loop and a scratch MCP server, writes report.json
and report.md, and exits 1 when the gate fails (a scenario under the floors of the thresholds
file, or worse than --baseline by more than it allows), naming the scenarios; 2 when it cannot
run. `python -m evals export-failures REPORT --out FILE.jsonl` writes a report's failing
samples as a chat-format dataset (evals/export.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from loadtest.backend import identify

from . import site
from .export import export_failures
from .report import THRESHOLDS, Endpoint, GateReport, build, gate, load_thresholds, write
from .runner import Sample, ScratchStack, run_sample
from .scenarios import SCENARIOS, Scenario, select

RESULTS = Path("var/eval")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export-failures"]:
        return export_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m evals", description=__doc__)
    parser.add_argument("--model-url", help="an OpenAI-compatible base URL (…/v1); default: "
                        "a simulator started for the run")  # fmt: skip
    parser.add_argument("--model", help="the model name to ask for (default: the loop's)")
    parser.add_argument("--samples", type=int, default=1,
                        help="runs of each scenario (more for a model that samples)")  # fmt: skip
    parser.add_argument("--scenarios", help="comma-separated: scenario names or groups (create "
                        "runs create.*), and site files (*.toml, run with the built-in ones); "
                        "default: all built-in")  # fmt: skip
    parser.add_argument("--baseline", type=Path, help="an earlier report.json to compare with")
    parser.add_argument("--thresholds", type=Path, default=THRESHOLDS)
    parser.add_argument("--out", type=Path, help=f"default: {RESULTS}/<time>/")
    args = parser.parse_args(argv)
    try:
        if args.samples < 1:
            raise ValueError("--samples must be 1 or more")
        scenarios = suite(args.scenarios)
        thresholds = load_thresholds(args.thresholds)
        baseline = (
            GateReport.model_validate_json(args.baseline.read_text()) if args.baseline else None
        )
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    out = args.out or RESULTS / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        samples, backend, model_url = _run(args, scenarios)
    except (TimeoutError, RuntimeError, OSError) as error:
        # the scratch stack did not come up or went away: no verdict, not a failed gate
        print(f"error: the gate could not run: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    if samples is None:
        return 2
    endpoint = Endpoint(url=model_url, model=args.model or backend["models"][0],
                        served_by=backend["kind"], version=backend["version"])  # fmt: skip
    report = build(samples, endpoint, scenarios)
    findings = gate(report, baseline, thresholds)
    as_json, as_md = write(report, findings, out)
    print(as_md.read_text())
    print(f"report: {as_json} and {as_md}")
    return 1 if findings else 0


def _run(
    args: argparse.Namespace, scenarios: tuple[Scenario, ...]
) -> tuple[list[Sample] | None, dict[str, Any], str]:
    """Every sample on a scratch stack (the simulator too, without --model-url); None for the
    samples when the model lists no model."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eval.")))
        model_url = args.model_url
        if model_url is None:
            from ops.services import model_simulator

            model_url = f"{stack.enter_context(model_simulator(workdir, profile='instant'))}/v1"
        backend = identify(model_url)
        if not backend["models"]:
            print(f"error: {model_url} lists no model ({'; '.join(backend['notes'])})",
                  file=sys.stderr)  # fmt: skip
            return None, backend, model_url
        scratch = stack.enter_context(ScratchStack(workdir, model_url, args.model).started())
        samples: list[Sample] = []
        for scenario in scenarios:
            for number in range(1, args.samples + 1):
                sample = run_sample(scratch, scenario, number)
                samples.append(sample)
                print(_line(sample), flush=True)
        return samples, backend, model_url


def suite(chosen: str | None) -> tuple[Scenario, ...]:
    """The scenarios --scenarios names: the built-in ones and each site file's (all checked
    before any runs), then only those named, if any are."""
    items = [item.strip() for item in (chosen or "").split(",") if item.strip()]
    files = [Path(item) for item in items if item.endswith(".toml")]
    names = [item for item in items if not item.endswith(".toml")]
    everything = SCENARIOS
    for path in files:
        if not path.is_file():
            raise ValueError(f"{path}: no such scenario file")
        everything += site.load(path, {s.name for s in everything})
    if names:
        return select(names, everything)
    return everything


def export_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals export-failures",
                                     description="a report's failing samples as chat-format "
                                     "JSONL (see evals/export.py for what is written)")  # fmt: skip
    parser.add_argument("report", type=Path, help="a report.json of python -m evals")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    try:
        written, skipped = export_failures(args.report, args.out)
    except (ValueError, OSError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    kept = f"; {skipped} failing sample(s) had no conversation kept" if skipped else ""
    print(f"{written} failing sample(s) written to {args.out}{kept}")
    return 0


def _line(sample: Sample) -> str:
    if sample.error:
        return f"  {sample.scenario} #{sample.sample}: not scored: {sample.error}"
    verdict = "goal" if sample.goal else "MISSED"
    extra = f", untrue: {', '.join(sample.untrue)}" if sample.untrue else ""
    refused = f", refused {', '.join(sample.refusals)}" if sample.refusals else ""
    wrong = f", malformed {'; '.join(map(str, sample.malformed_calls))}" if sample.malformed else ""
    return (f"  {sample.scenario} #{sample.sample}: {verdict} ({sample.status}, {sample.turns} "
            f"turns{refused}{wrong}{extra}, {sample.seconds:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
