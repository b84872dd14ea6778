"""The suite's own shape: a test module is a leaf. What tests share lives in helper modules, so
that collecting, running or moving one test module never drags another's tests or fixtures in
(pytest would collect an imported test function twice, and xdist workers load each module)."""

from __future__ import annotations

from pathlib import Path

from tests.imports import imports_of, module_name
from tests.scheduling import LONG_MODULES

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def imports_of_test_modules(source: str, module: str) -> list[str]:
    """The test modules and conftests `source` (the module `module`) imports."""
    return [i.module for i in imports_of(source, module) if _is_test_module(i.module)]


def test_the_check_sees_each_way_of_importing_a_test_module():
    def seen(source: str) -> list[str]:
        return imports_of_test_modules(source, "tests.mcp_server.test_x")

    assert seen("from .test_http import session") == ["tests.mcp_server.test_http"]
    assert seen("from .conftest import find") == ["tests.mcp_server.conftest"]
    assert seen("from . import test_rules") == ["tests.mcp_server.test_rules"]
    assert seen("import tests.loop.test_runs") == ["tests.loop.test_runs"]
    assert seen("from tests.k8s import conftest") == ["tests.k8s.conftest"]
    assert seen("from .helpers import find") == []


def test_no_test_module_imports_another_or_a_conftest():
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (
            names := imports_of_test_modules(
                path.read_text(encoding="utf-8"), module_name(path, TESTS.parent)
            )
        )
    }
    assert offenders == {}


def test_every_module_scheduled_first_exists():
    missing = [m for m in LONG_MODULES if not (TESTS.parent / m).is_file()]
    assert missing == []
