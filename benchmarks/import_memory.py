"""Peak memory of `python -m mcp_server import` as the company grows: a generated HR export of
N employees (teams of ten under managers, every leave type filled in), imported into a fresh
SQLite database as the operator runs it, dry run first, then for real, then again (every row
unchanged). Prints each command's peak resident set (ru_maxrss of the child) and seconds.

The MCP server's container is limited to 1 GiB in Kubernetes (deploy/k8s/base): an import
must stay well under it.

    python benchmarks/import_memory.py --employees 100000
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LEAVE_TYPES = ("特休", "病假", "事假", "補休")


def export(path: Path, employees: int) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(f"employee_id,name,manager_id,{','.join(LEAVE_TYPES)},active\n")
        for n in range(employees):
            manager = "" if n == 0 else f"P{(n // 10) * 10 if n % 10 else (n // 100) * 10:06d}"
            if manager == f"P{n:06d}":
                manager = "P000000"
            out.write(f"P{n:06d},員工{n},{manager},{n % 15},30,14,{n % 3},true\n")


def peak_of(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(peak RSS in MiB, seconds, last line said) of `python -m mcp_server …`, a child of its
    own: a forked helper process waits for it, so ru_maxrss of the helper's children is its
    alone."""
    read, write = os.pipe()
    helper = os.fork()
    if helper == 0:  # the helper: run the command, report its peak through the pipe
        os.close(read)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "mcp_server", *args],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        said = (done.stdout + done.stderr).strip().splitlines()
        last = f"exit {done.returncode}: {said[-1] if said else ''}"
        os.write(write, f"{peak_kib}\t{seconds}\t{last}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(helper, 0)
    peak, took, last = answer.split("\t", 2)
    return int(peak) / 1024, float(took), last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--employees", type=int, nargs="+", default=[100_000])
    args = parser.parse_args()
    print(f"{'employees':>9}  {'command':<16} {'peak RSS':>10} {'seconds':>8}  said")
    for employees in args.employees:
        with tempfile.TemporaryDirectory(prefix="import-memory.") as folder:
            csv_file = Path(folder) / "people.csv"
            export(csv_file, employees)
            env = {
                "MCP_DATABASE_URL": f"sqlite:///{Path(folder) / 'leave.db'}",
                "MCP_ENV": "production",
                "MCP_ELICITATION_STATE_KEY": os.urandom(32).hex(),
            }
            peak_of(["seed"], env)
            for name, command in (
                ("dry run", ["import", "--dry-run", str(csv_file)]),
                ("import", ["import", str(csv_file)]),
                ("again", ["import", str(csv_file)]),
            ):
                peak, seconds, said = peak_of(command, env)
                print(f"{employees:>9}  {name:<16} {peak:>6.0f} MiB {seconds:>8.1f}  {said[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
