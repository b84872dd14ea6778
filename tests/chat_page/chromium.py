"""Headless Chromium driven by Playwright (PyPI), the browser being Debian's own package
(.ci/run installs it): launched by its path, no `playwright install` (no browser download works
on these machines). Nothing but this machine answers: every host name fails to resolve, and
every request for another address is aborted and noted, so a page that needs a CDN or any
other outside file fails here."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Route, sync_playwright

from tests.browser import FLAGS
from tests.support import REPO_ROOT

# Screenshots every browser test keeps, for a person to look at (git ignores var/).
ARTIFACTS = REPO_ROOT / "var" / "test-artifacts"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def chromium_binary() -> str:
    """Debian's browser itself (`chromium` on PATH is a wrapper script Playwright cannot
    drive); the test is skipped where the package is not installed."""
    if shutil.which("dpkg") is not None:
        listed = subprocess.run(
            ["dpkg", "-L", "chromium"], capture_output=True, text=True, check=False
        ).stdout.split()
        for path in listed:
            if path.endswith("/chromium/chromium") and Path(path).is_file():
                return path
    pytest.skip("needs Debian's chromium (apt-get install chromium)")


@dataclass
class Offline:
    """The requests the browser made, and those it was stopped from making."""

    requested: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def route(self, route: Route) -> None:
        url = route.request.url
        host = urlsplit(url).hostname or ""
        if url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
            self.requested.append(url)
            route.fallback()
        else:
            self.blocked.append(url)
            route.abort("addressunreachable")


@contextmanager
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    with sync_playwright() as playwright:
        yield _launch(playwright, binary)


def _launch(playwright: Playwright, binary: str) -> Browser:
    # --headless is Playwright's to give; the rest are tests/browser.py's offline flags
    args = [f for f in FLAGS if f != "--headless"]
    return playwright.chromium.launch(executable_path=binary, args=args, headless=True)


def offline_context(
    browser: Browser, offline: Offline, *, width: int = 1280, height: int = 900
) -> BrowserContext:
    """A context (its own cookies and storage) that reaches this machine only, zh-TW."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, locale="zh-TW", timezone_id="Asia/Taipei"
    )
    context.route("**/*", offline.route)
    context.set_default_timeout(30_000)
    return context


def shoot(page: Page, folder: Path, name: str, *, full_page: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=path, full_page=full_page)
    return path
