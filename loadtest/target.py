"""Where the load goes: each URL from its setting, else the running local stack's (`make dev`,
`make demo`: `.run/urls.json`, which follows LOOP_PUBLISHED_PORT, MCP_PUBLISHED_PORT and
LOCAL_MODEL_PORT), else the default port; and whether anything answers there, checked in
seconds before a run is spent on refused connections."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from .settings import DEFAULT_LOOP_URL, DEFAULT_MCP_URL, DEFAULT_MODEL_URL, LoadSettings

PROBE_SECONDS = 3.0
# A target that times out is asked again for this long: a router whose first worker is slow
# after a restart has been seen to let 9 s of probes go unanswered and then serve normally.
PROBE_BUDGET_SECONDS = 30.0


@dataclass(frozen=True)
class Target:
    what: str  # e.g. "the loop"
    setting: str  # the LoadSettings field
    url: str
    origin: str  # where the URL came from
    probe: str  # what is asked to see that something answers

    @property
    def flag(self) -> str:
        return f"--{self.setting.replace('_', '-')}"


# setting → (what it is, the local stack's service, its path there, the default, the probe)
PLACES = {
    "loop_url": ("the loop", "loop", "", DEFAULT_LOOP_URL, "/healthz"),
    "mcp_url": ("the MCP server", "mcp-server", "/mcp", DEFAULT_MCP_URL, ""),
    "model_url": ("the model server", "vllm-router", "/v1", DEFAULT_MODEL_URL, "/models"),
}
# the places each kind of user needs
NEEDS = {
    "agent": ("loop_url", "mcp_url"),
    "facade": ("loop_url", "mcp_url"),
    "model": ("model_url",),
}


def resolve(settings: LoadSettings, local: dict[str, str]) -> tuple[LoadSettings, list[Target]]:
    """The settings with every URL filled in, and each as a Target."""
    targets = []
    for setting, (what, service, path, default, probe) in PLACES.items():
        given = getattr(settings, setting).strip()
        if given:
            url, origin = given, f"{setting_flag(setting)} / LOAD_{setting.upper()}"
        elif service in local:
            url, origin = local[service] + path, "the running local stack (.run/urls.json)"
        else:
            url, origin = default, "the default; no local stack is running"
        targets.append(Target(what, setting, url, origin, url.rstrip("/") + probe))
    filled = settings.model_copy(update={t.setting: t.url for t in targets})
    return filled, targets


def setting_flag(setting: str) -> str:
    return f"--{setting.replace('_', '-')}"


def needed(targets: list[Target], user_classes: str) -> list[Target]:
    wanted = {s for c in user_classes.split(",") for s in NEEDS[c]}
    return [t for t in targets if t.setting in wanted]


def passing(reason: object) -> bool:
    """Whether a failure to reach a server may pass on its own: a timeout, or a name server
    that did not answer (EAI_AGAIN: a container network's DNS restarting as containers come
    and go), as opposed to a refusal or a name that does not exist."""
    if isinstance(reason, TimeoutError):
        return True
    return isinstance(reason, socket.gaierror) and reason.errno == socket.EAI_AGAIN


def unanswered(
    target: Target, timeout: float = PROBE_SECONDS, budget: float = PROBE_BUDGET_SECONDS
) -> str | None:
    """Why nothing answers at the target (refused, timed out, no such host), else None: any
    HTTP answer, even 401 or 404, means a server is there. A refusal or an unknown host is
    final at once; a timeout or an unanswered name lookup is asked again until `budget`
    seconds have gone (a busy stack answers late, a missing one never)."""
    deadline = time.monotonic() + budget
    while True:
        try:
            with urllib.request.urlopen(target.probe, timeout=timeout):
                return None
        except urllib.error.HTTPError:
            return None
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            if not passing(reason) or time.monotonic() + timeout > deadline:
                return str(reason)
            if not isinstance(reason, TimeoutError):
                time.sleep(0.5)  # a lookup fails at once; ask again in a moment, not in a spin


def refusal(target: Target, why: str) -> str:
    """One line: the URL, what should be there, where the URL came from, what to do."""
    return (
        f"load: nothing answers at {target.probe} ({target.what}, from {target.origin}): {why}; "
        f"start the stack (make demo, make dev or make up) or point {target.flag} at it"
    )
