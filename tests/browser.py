"""A page as headless Chromium renders it with no network but loopback (Debian's `chromium`).

An air-gapped GPU box is the bundle's normal home, so pages it serves are checked the way such
a box would show them: every host name fails to resolve, only 127.0.0.1 answers.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Without the background-networking flags Chromium keeps trying the closed network, and every
# start looks up Google's hosts; without --no-sandbox it will not start as root.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


def chromium() -> str:
    """The browser's path; the test is skipped where it is not installed (.ci/run installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    return found


def _run(url: str, *args: str, budget_ms: int) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )


def rendered_dom(url: str, budget_ms: int = 5000) -> str:
    """The DOM after the page's scripts ran (for up to `budget_ms` of virtual time)."""
    done = _run(url, "--dump-dom", budget_ms=budget_ms)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def screenshot(url: str, path: Path, size: str = "1280,900", budget_ms: int = 5000) -> Path:
    """A PNG of the rendered page (to look at when a DOM check fails)."""
    done = _run(url, f"--screenshot={path}", f"--window-size={size}", budget_ms=budget_ms)
    if done.returncode != 0 or not path.is_file():
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return path
