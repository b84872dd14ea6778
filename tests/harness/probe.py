"""Run by tests/harness/test_forkserver.py as `python -m tests.harness.probe`: says what a child
process sees, then exits as its arguments ask."""

from __future__ import annotations

import json
import os
import signal
import sys

import common.entrypoint  # one of the modules the fork server imports before it forks

if __name__ == "__main__":
    mark_before = getattr(common.entrypoint, "probe_mark", None)
    common.entrypoint.probe_mark = os.getpid()  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "name": __name__,
                "probe": os.environ.get("PROBE"),
                "patched": os.environ.get("PATCHED_IN_THE_TEST_PROCESS"),
                "cwd": os.getcwd(),
                "stdin": sys.stdin.read(),
                "pid": os.getpid(),
                "mark_before": mark_before,
            }
        )
    )
    print("to standard error", file=sys.stderr)
    if sys.argv[1:] == ["die"]:
        os.kill(os.getpid(), signal.SIGTERM)
    sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
