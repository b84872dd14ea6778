"""`python -m common.healthprobe [URL]`: the container healthcheck, 0 when the service answers.

With a URL it probes that URL. Without one it finds which of the bundle's services runs in this
container (the `python -m <service>` process) and probes that service's own endpoint on the port
its settings give, so the image's default healthcheck is right for every role. A one-shot job
(`mcp_server seed`) is healthy while it runs.

Every argument is a single word: podman 4.3's Docker-compatible API re-splits exec-form
healthchecks on spaces, and a probe written as `python -c "import …"` breaks there.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

# service module → (port setting, default port, path a healthcheck should probe)
SERVICES = {
    "loop": ("LOOP_PORT", "8080", "/healthz"),
    "mcp_server": ("MCP_PORT", "8090", "/readyz"),
    "modelsim": ("SIM_PORT", "8000", "/health"),
}
ONE_SHOT_COMMANDS = {("mcp_server", "seed"), ("mcp_server", "issue-token")}
TIMEOUT_SECONDS = 2.0


def probe(url: str) -> tuple[bool, str]:
    """(answered 2xx, what it said): the status, and the start of the body of a refusal."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            return 200 <= response.status < 300, f"{url} answered {response.status}"
    except urllib.error.HTTPError as error:
        body = error.read(300).decode(errors="replace")
        return False, f"{url} answered {error.code} {body}".strip()
    except (OSError, ValueError) as error:
        return False, f"{url}: {getattr(error, 'reason', error)}"


def _processes(proc: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield (
            [a.decode(errors="replace") for a in argv if a],
            dict(v.decode(errors="replace").partition("=")[::2] for v in environ if b"=" in v),
        )


def discover(proc: Path = Path("/proc")) -> tuple[str | None, str]:
    """(URL to probe or None for a one-shot job, what was found) for this container's service."""
    for argv, environ in _processes(proc):
        if "-m" not in argv[:-1]:
            continue
        module = argv[argv.index("-m") + 1]
        if module not in SERVICES:
            continue
        rest = argv[argv.index("-m") + 2 :]
        if rest and (module, rest[0]) in ONE_SHOT_COMMANDS:
            return None, f"{module} {rest[0]} (a one-shot job)"
        port_setting, default_port, path = SERVICES[module]
        port = environ.get(port_setting, default_port)
        return f"http://127.0.0.1:{port}{path}", module
    return "", "none of our services (python -m loop | mcp_server | modelsim) is running here"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args:
        url = args[0]
    else:
        found, what = discover()
        if found is None:
            print(f"healthy: {what}")
            return 0
        if not found:
            print(f"unhealthy: {what}")
            return 1
        url = found
    healthy, detail = probe(url)
    print(("healthy: " if healthy else "unhealthy: ") + detail)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
