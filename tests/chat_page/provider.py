"""The company's identity provider for the chat page's tests: npm `oidc-provider` (OpenID
Certified), pinned by tests/chat_page/oidc/package-lock.json, installed with `npm ci` into
.cache/oidc-provider/ once per lock, and run as a Node process (oidc/provider.mjs) on a port of
this machine. Skipped, saying why, only where Node.js or npm is missing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO_ROOT, ServiceProcess

SOURCE = Path(__file__).resolve().parent / "oidc"
CACHE = REPO_ROOT / ".cache" / "oidc-provider"
PACKAGE_FILES = ("package.json", "package-lock.json")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"needs Node.js and npm for oidc-provider (apt-get install nodejs npm): no {name}"
        )
    return found


def installed() -> Path:
    """A folder with oidc-provider's node_modules, as the lock pins them, and provider.mjs."""
    node_and_npm = (_tool("node"), _tool("npm"))
    digest = hashlib.sha256(b"".join((SOURCE / f).read_bytes() for f in PACKAGE_FILES))
    folder = CACHE / digest.hexdigest()[:16]
    if not (folder / "node_modules" / "oidc-provider" / "package.json").is_file():
        # installed beside it, then moved in whole: a worker that looks meanwhile (make test
        # runs several) never sees half an install
        partial = CACHE / f"{folder.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name in PACKAGE_FILES:
            shutil.copy(SOURCE / name, partial / name)
        done = subprocess.run(
            [node_and_npm[1], "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=partial, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.fail(f"npm ci of oidc-provider failed:\n{done.stderr[-3000:]}")
        try:
            partial.rename(folder)
        except OSError:  # another worker got there first: theirs is the same install
            shutil.rmtree(partial, ignore_errors=True)
    script = folder / "provider.mjs"
    # ESM resolves `oidc-provider` next to the script, so the script sits with node_modules
    if not script.is_file() or script.read_bytes() != (SOURCE / "provider.mjs").read_bytes():
        temporary = folder / f"provider.{os.getpid()}.mjs"
        shutil.copy(SOURCE / "provider.mjs", temporary)
        temporary.replace(script)
    return folder


@dataclass(frozen=True)
class Account:
    """A person at the provider; `employee_id` is the claim the MCP server reads."""

    username: str
    password: str
    sub: str
    name: str
    employee_id: str


class IdentityProvider:
    """oidc-provider on `port`, with the chat page registered as a public client (PKCE)."""

    def __init__(
        self,
        workdir: Path,
        port: int,
        *,
        client_id: str,
        redirect_uris: list[str],
        audience: str,
        accounts: list[Account],
        access_token_ttl: int = 300,
        employee_claim: str = "employee_id",
    ) -> None:
        self.folder = installed()
        self.workdir = workdir
        self.issuer = f"http://127.0.0.1:{port}"
        self.settings: dict[str, Any] = {
            "issuer": self.issuer,
            "port": port,
            "client_id": client_id,
            "redirect_uris": redirect_uris,
            "audience": audience,
            "employee_claim": employee_claim,
            "access_token_ttl": access_token_ttl,
            "accounts": [asdict(a) for a in accounts],
        }
        self.process: ServiceProcess | None = None
        self.starts = 0

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def start(self) -> None:
        self.starts += 1
        argv = [_tool("node"), str(self.folder / "provider.mjs"), json.dumps(self.settings)]
        log = self.workdir / f"oidc-provider-{self.starts}.log"
        self.process = ServiceProcess([], {}, log, argv=argv)
        self.process.wait_ready(f"{self.issuer}/.well-known/openid-configuration", timeout=60)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def restart(self) -> None:
        """A new signing key and no sessions, grants or refresh tokens: every token issued
        before is refused from now on, as after a provider's key rotation and session loss."""
        self.stop()
        self.start()

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON lines provider.mjs wrote, of every start, oldest first."""
        found = []
        for start in range(1, self.starts + 1):
            log = self.workdir / f"oidc-provider-{start}.log"
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("{"):
                    event = json.loads(line)
                    if name is None or event.get("event") == name:
                        found.append(event)
        return found
