"""Whom a load test acts as: employees of its own, made for the run and removed after it, or
the tokens it was given (the demo's, or a person's only when told so explicitly).

A load test once ran in production as a real person (their token and their manager's) and left
1,418 「壓測…」 leaves in their history and audit log. Its own employees are made and removed by
the MCP server's operator commands (`add-load-test-employees`, `remove-load-test-employees`,
mcp_server/load_test_people.py) run through `LOAD_ADMIN_COMMAND`, since only they reach its
database; their ids start with the run's marker (`loadtest-…`), by which leftovers of a run that
could not clean up are found.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from common.demo import DEMO_EMPLOYEES

from .mcp import McpClient, McpError
from .settings import LoadSettings

DEMO_TOKENS = frozenset(e.token for e in DEMO_EMPLOYEES)
ADMIN_TIMEOUT_SECONDS = 120
REMOVE = "remove-load-test-employees"


class PeopleError(Exception):
    """The load test cannot act as anyone it may; the message is one line."""


@dataclass(frozen=True)
class Own:
    marker: str
    employee_id: str
    employee_token: str
    manager_id: str
    manager_token: str


def admin_command(settings: LoadSettings) -> list[str]:
    return shlex.split(settings.admin_command) or [sys.executable, "-m", "mcp_server"]


def refusal(settings: LoadSettings) -> str | None:
    """Why the given tokens may not be used: a person's own, without --allow-real-employee."""
    if settings.employees == "own" or settings.allow_real_employee:
        return None
    real = [t for t in (settings.token, settings.manager_token) if t not in DEMO_TOKENS]
    if not real:
        return None
    return (
        "load: --token / --manager-token is a person's own token: the load test would write "
        "its leaves into their history and audit log; leave them out (it makes employees of "
        "its own) or add --allow-real-employee"
    )


def wants_own(settings: LoadSettings) -> bool:
    """Own employees: asked for, or `auto` with demo tokens the MCP server refuses
    (production)."""
    if settings.employees != "auto":
        return settings.employees == "own"
    if settings.token not in DEMO_TOKENS:
        return False
    client = McpClient(settings.mcp_url, settings.token)
    try:
        return not client.signs_in()
    except (McpError, OSError) as error:
        raise PeopleError(
            f"load: could not ask the MCP server at {settings.mcp_url}: {error}"
        ) from None
    finally:
        client.close()


def add(settings: LoadSettings) -> Own:
    """Make the run's employees, and check the MCP server takes their tokens (the command
    may have reached another database)."""
    said = _admin(settings, ["add-load-test-employees"])
    try:
        made = json.loads(said.splitlines()[0])
        own = Own(
            made["marker"],
            made["employee"]["id"],
            made["employee"]["token"],
            made["manager"]["id"],
            made["manager"]["token"],
        )
    except (ValueError, IndexError, KeyError, TypeError):
        raise PeopleError(
            f"load: add-load-test-employees said no employees: {said[:200]!r}"
        ) from None
    client = McpClient(settings.mcp_url, own.employee_token)
    try:
        taken = client.signs_in()
    except (McpError, OSError) as error:
        taken, why = False, str(error)
    else:
        why = "401"
    finally:
        client.close()
    if not taken:
        remove(settings, own.marker)
        raise PeopleError(
            f"load: the MCP server at {settings.mcp_url} does not take the load-test "
            f"employees' tokens ({why}): --admin-command / LOAD_ADMIN_COMMAND must run its "
            "operator commands on its own database"
        )
    return own


def remove(settings: LoadSettings, marker: str) -> str:
    """Remove the run's employees with their leaves and tokens: what the command said."""
    return _admin(settings, [REMOVE, marker]).strip()


@contextmanager
def own_employees(settings: LoadSettings) -> Iterator[Own]:
    """The run's own employees while the block runs; removed after it, however it ends
    (Ctrl-C, an error). A removal that fails says how to clean up by hand."""
    own = add(settings)
    print(f"load: acting as {own.employee_id} and their manager {own.manager_id}", flush=True)
    try:
        yield own
    finally:
        try:
            print(f"load: {remove(settings, own.marker)}", flush=True)
        except PeopleError as error:
            print(
                f"{error}; remove them with: python -m mcp_server {REMOVE} {own.marker}",
                file=sys.stderr,
            )


def _admin(settings: LoadSettings, args: list[str]) -> str:
    command = [*admin_command(settings), *args]
    shown = " ".join(command)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=ADMIN_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PeopleError(f"load: could not run `{shown}`: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeopleError(f"load: `{shown}` failed ({done.returncode}): {last}")
    return done.stdout
