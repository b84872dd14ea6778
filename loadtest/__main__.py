"""`python -m loadtest`: a headless Locust run into a fresh results folder, then summary.json.

Flags override the LOAD_* settings; anything after `--` goes to Locust as it is (e.g.
`-- --processes 2`)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import backend, conversations, people, target
from .results import write_summary
from .settings import LoadSettings
from .summary import LoadInfo, LoadSummary, ScheduleStep

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
SWITCHES = ("allow_real_employee",)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    for name, field in LoadSettings.model_fields.items():
        flag = f"--{name.replace('_', '-')}"
        if name in SWITCHES:  # a switch, not a value: `--allow-real-employee`
            parser.add_argument(
                flag, dest=name, action="store_const", const="true", help=field.description
            )
        else:
            parser.add_argument(flag, dest=name, help=field.description)
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    try:
        settings = LoadSettings(**given)
    except ValidationError as error:
        for problem in error.errors():
            setting = "_".join(str(part) for part in problem["loc"])
            where = f"--{setting.replace('_', '-')} / LOAD_{setting.upper()}: " if setting else ""
            print(f"configuration error: {where}{problem['msg']}", file=sys.stderr)
        return 2
    if settings.ignored():
        print(f"configuration error: {settings.ignored()}", file=sys.stderr)
        return 2
    acting = bool({"agent", "facade"} & set(settings.user_classes.replace(" ", "").split(",")))
    if acting and (why := people.refusal(settings)):
        print(why, file=sys.stderr)
        return 2
    from devtools.localstack import LocalStack

    settings, targets = target.resolve(settings, LocalStack().urls())
    for place in target.needed(targets, settings.user_classes):
        asked = time.monotonic()
        why = target.unanswered(place)
        if why is not None:
            print(target.refusal(place, why), file=sys.stderr)
            return 2
        waited = time.monotonic() - asked
        late = f", answered only after {waited:.0f} s" if waited > target.PROBE_SECONDS else ""
        print(f"load: {place.what} at {place.url} ({place.origin}{late})", flush=True)
    try:
        with contextlib.ExitStack() as cleanup:
            if acting and people.wants_own(settings):
                own = cleanup.enter_context(people.own_employees(settings))
                settings = settings.model_copy(
                    update={"token": own.employee_token, "manager_token": own.manager_token}
                )
            return _measure(settings, extra)
    except people.PeopleError as error:
        print(error, file=sys.stderr)
        return 2


def _measure(settings: LoadSettings, extra: list[str]) -> int:
    """Locust over the settings' shape, then summary.json: Locust's exit status."""
    served_by = backend.identify(settings.model_url)
    classes = settings.user_class_names()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(settings.results_dir) / stamp
    conversations.write(run_dir / "model_requests.json")
    env = {
        **os.environ,
        **{f"LOAD_{k.upper()}": str(v) for k, v in settings.model_dump().items()},
        "LOAD_RESULTS_RUN_DIR": str(run_dir),
    }
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        *_interface(settings),
        "--csv",
        str(run_dir / "locust"),
        "--html",
        str(run_dir / "locust.html"),
        # users finish the run they are in, so no request is cut off and counted half
        "--stop-timeout",
        str(int(settings.slo_run_p95_ms / 1000 * 4) + 10),
        *extra,
        *classes,
    ]
    print(f"load: {settings.shape}, {' + '.join(classes)} → {run_dir}", flush=True)
    if settings.web_port:
        print(
            f"web UI: http://{settings.web_host}:{settings.web_port} while the run goes "
            "(Ctrl-C ends it early; the summary is written either way)",
            flush=True,
        )
    locust = subprocess.Popen(command, env=env)
    # Ctrl-C reaches Locust too (one process group): it stops and writes its reports, then
    # the summary is written from what it logged. Here it only starts the nudge; set after the
    # start, so Locust keeps its own SIGINT handling.
    previous = signal.signal(signal.SIGINT, lambda *_: _nudge(locust))
    try:
        status = locust.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    summary = write_summary(
        run_dir, settings.slo(), settings.prometheus_url, served_by, _load(settings)
    )
    print(json.dumps(_headline(summary), indent=1, ensure_ascii=False))
    print(f"summary: {run_dir / 'summary.json'}")
    return status


# A Ctrl-C that reaches Locust while its interpreter is busy elsewhere has been seen to go
# unheard (the run kept going, nothing logged); it is said again, then SIGTERM as a last resort.
NUDGE_SECONDS = (10.0, 20.0)


def _nudge(locust: subprocess.Popen[bytes]) -> None:
    def later() -> None:
        for wait, sent in zip(NUDGE_SECONDS, (signal.SIGINT, signal.SIGTERM), strict=True):
            try:
                locust.wait(wait)
                return
            except subprocess.TimeoutExpired:
                locust.send_signal(sent)

    threading.Thread(target=later, daemon=True).start()


def _load(settings: LoadSettings) -> LoadInfo:
    """How the load was made, for whoever reads the summary (the cost report among them)."""
    return LoadInfo(
        user_classes=settings.user_classes,
        shape=settings.shape,
        think_seconds=settings.think_seconds,
        model_think_seconds=settings.model_think_seconds,
        max_tokens=settings.max_tokens,
        schedule=[ScheduleStep(**step._asdict()) for step in settings.schedule()],
        seconds=settings.total_seconds(),
    )


def _interface(settings: LoadSettings) -> list[str]:
    if not settings.web_port:
        return ["--headless", "--only-summary"]
    # The shape starts at once; when it ends, or on Ctrl-C, Locust quits and writes its reports
    # (locust.html keeps the UI's charts). Without --autoquit it would keep serving instead.
    return [
        *("--autostart", "--autoquit", "0"),
        *("--web-host", settings.web_host, "--web-port", str(settings.web_port)),
    ]


def _headline(summary: LoadSummary) -> list[dict[str, Any]]:
    rows = []
    for step in summary.steps:
        model, agent, facade = step.model, step.agent, step.facade
        row: dict[str, Any] = {"step": step.step, "users": step.users}
        if step.phase:
            row["phase"] = step.phase
        if agent:
            row["runs/s"] = round(agent.runs_per_s, 3)
            row["run p95 ms"] = agent.run_ms.p95
        if facade:
            row["facade runs/s"] = round(facade.runs_per_s, 3)
            row["facade run p95 ms"] = facade.run_ms.p95
        if model:
            row["model req/s"] = round(model.requests_per_s, 3)
            row["TTFT p99 ms"] = model.ttft_ms.p99
            row["ITL p99 ms"] = model.itl_ms.p99
        server = step.prometheus
        for name, label in (
            ("gpu_util_percent_mean", "GPU util %" + summary.simulated_mark()),
            ("vllm_ttft_p95_ms", "vLLM TTFT p95 ms" + summary.simulated_mark()),
        ):
            value = None if server is None else getattr(server, name)
            if value is not None:
                row[label] = round(value, 1)
        rows.append(row | {"errors": step.errors, "SLO met": step.slo_met})
    return rows


if __name__ == "__main__":
    sys.exit(main())
