"""`python -m loadtest`: a headless Locust run into a fresh results folder, then summary.json.

Flags override the LOAD_* settings; anything after `--` goes to Locust as it is (e.g.
`-- --processes 2`)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import conversations
from .results import write_summary
from .settings import LoadSettings

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
CLASSES = {"agent": "AgentUser", "model": "ModelUser"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    for name, field in LoadSettings.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=field.description)
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    settings = LoadSettings(**given)
    classes = [CLASSES[c.strip()] for c in settings.user_classes.split(",") if c.strip()]
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
        "--headless",
        "--only-summary",
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
    status = subprocess.run(command, env=env).returncode
    summary = write_summary(run_dir, settings.slo())
    print(json.dumps(_headline(summary), indent=1, ensure_ascii=False))
    print(f"summary: {run_dir / 'summary.json'}")
    return status


def _headline(summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for step in summary["steps"]:
        model, agent = step["model"] or {}, step["agent"] or {}
        rows.append(
            {
                "step": step["step"],
                "users": step["users"],
                "runs/s": round(agent.get("runs_per_s", 0), 3),
                "model req/s": round(model.get("requests_per_s", 0), 3),
                "run p95 ms": (agent.get("run_ms") or {}).get("p95"),
                "TTFT p99 ms": (model.get("ttft_ms") or {}).get("p99"),
                "ITL p99 ms": (model.get("itl_ms") or {}).get("p99"),
                "errors": step["errors"],
                "SLO met": step["slo_met"],
            }
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())
