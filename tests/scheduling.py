"""The order `make test`'s workers take the modules in."""

from __future__ import annotations

import pytest

# The modules that take a minute or more of wall time on two cores (`--durations`, see
# docs/testing.md). `make test` hands whole modules to its workers in collection order, so these
# go first: started last, the longest one alone would set the run's end.
LONG_MODULES = (
    "tests/deploy/test_demo.py",
    "tests/mcp_server/test_people.py",
    "tests/loop/test_traces.py",
    "tests/chat_page/test_chat_page.py",
    "tests/loop/test_bad_tokens.py",
    "tests/evals/test_gate.py",
    "tests/loop/test_write_outcomes.py",
    "tests/loop/test_shutdown.py",
    "tests/mcp_server/test_backup.py",
    "tests/mcp_server/test_http.py",
    "tests/loadtest/test_own_data.py",
    "tests/monitoring/test_alertmanager.py",
    "tests/loadtest/test_end_to_end.py",
)


def long_modules_first(item: pytest.Item) -> int:
    """A sort key: the long modules in their listed order, then every other module; sort() is
    stable, so those keep their collection order, and tests their order in a module."""
    module = item.nodeid.split("::", 1)[0]
    return LONG_MODULES.index(module) if module in LONG_MODULES else len(LONG_MODULES)
