"""What one `python -m loadtest.cost` costs as the volume asked for grows: wall time, peak
memory (RSS) and the report's length, each run a fresh process as `make cost` runs it.

The calculator's work does not grow with the volume (the staircase shows the rows around the
break-evens and the volume, the chart draws a bounded number of points), so the figures
should be flat; most of the time is importing matplotlib and drawing the chart twice.

    python benchmarks/cost_volumes.py --volumes 2e4 1e9 1e12
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = (
    *("--capacity-requests-per-s", "2.7", "--model-calls-per-request", "2.5"),
    *("--input-tokens-per-request", "3000", "--output-tokens-per-request", "100"),
    *("--settings", str(REPO_ROOT / "loadtest" / "cost.example.toml")),
)


def measure(volume: str, out: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, lines printed) of one run of the calculator."""
    command = [sys.executable, "-m", "loadtest.cost", *WORKLOAD, "--requests-per-day", volume]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COST_")}
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    printed = process.stdout.read()
    # reaped here rather than by Popen: wait4 gives this child's own peak (KB on Linux)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"--requests-per-day {volume}: exit {process.returncode}\n{printed}")
    return seconds, usage.ru_maxrss / 1024, len(printed.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--volumes", nargs="+", default=["2e4", "1e6", "1e9", "1e11", "1e12"])
    args = parser.parse_args()
    print(f"{'requests/day':>14} {'seconds':>8} {'peak RSS MB':>12} {'lines':>6}")
    with tempfile.TemporaryDirectory() as folder:
        for volume in args.volumes:
            seconds, rss, lines = measure(volume, Path(folder) / volume)
            print(f"{float(volume):>14,.0f} {seconds:>8.2f} {rss:>12.0f} {lines:>6}")


if __name__ == "__main__":
    main()
