"""The suite's own shape: a test module is a leaf. What tests share lives in helper modules, so
that collecting, running or moving one test module never drags another's tests or fixtures in
(pytest would collect an imported test function twice, and xdist workers load each module)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.scheduling import LONG_MODULES

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def imports_of_test_modules(source: str) -> list[str]:
    """The test modules and conftests an import in `source` names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and _is_test_module(node.module):
            found.append(node.module)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            # `import tests.x.test_y`, or `from tests.x import test_y` naming the module itself
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
    return found


def test_the_check_sees_each_way_of_importing_a_test_module():
    assert imports_of_test_modules("from .test_http import session") == ["test_http"]
    assert imports_of_test_modules("from .conftest import find") == ["conftest"]
    assert imports_of_test_modules("from . import test_rules") == ["test_rules"]
    assert imports_of_test_modules("import tests.loop.test_runs") == ["tests.loop.test_runs"]
    assert imports_of_test_modules("from tests.k8s import conftest") == ["conftest"]
    assert imports_of_test_modules("from .helpers import find") == []


def test_no_test_module_imports_another_or_a_conftest():
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (names := imports_of_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_every_module_scheduled_first_exists():
    missing = [m for m in LONG_MODULES if not (TESTS.parent / m).is_file()]
    assert missing == []
