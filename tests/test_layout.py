"""Who may import whom (docs/layout.md): nothing a site runs imports what only a developer or the
tests run. A site runs ops/ (make up and the rest), the release gate evals/ (on a new
fine-tune: docs/operations.md#release-gate) and the services; none of them imports devtools/,
harness/, benchmarks/ or tests/, nor starts one with `python -m`. loadtest/ — a developer's
`make load` on `make dev`'s stack and a site's load image alike — looks for that stack through
devtools/ only, inside the functions that do, so that importing it needs nothing else.

Read from the source with ast, every import (inside functions too), never by importing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import imports_of, module_name
from tests.support import REPO_ROOT

# What a site runs, and what only a developer or the tests run.
SITE = ("ops", "evals", "common", "loop", "mcp_server", "modelsim")
DEV_ONLY = ("devtools", "harness", "benchmarks", "tests")
# loadtest/ runs at a site too; it may reach these, inside a function, to find make dev's stack.
LOADTEST_MAY_LOOK_FOR_THE_LOCAL_STACK = ("devtools.localstack", "devtools.prometheus")
# Every top-level package, by audience; a new one must say where it stands.
AUDIENCES = {*SITE, *DEV_ONLY, "loadtest"}


def _names(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def _source_files(package: str) -> list[tuple[Path, str]]:
    root = REPO_ROOT / package
    return [(path, module_name(path, REPO_ROOT)) for path in sorted(root.rglob("*.py"))]


def _offences(package: str) -> list[str]:
    offences = []
    for path, module in _source_files(package):
        source = path.read_text(encoding="utf-8")
        for found in imports_of(source, module, path.name == "__init__.py"):
            if not _names(found.module, DEV_ONLY):
                continue
            allowed = (
                package == "loadtest"
                and found.how == "import"
                and found.in_function
                and _names(found.module, LOADTEST_MAY_LOOK_FOR_THE_LOCAL_STACK)
            )
            if not allowed:
                where = path.relative_to(REPO_ROOT)
                offences.append(f"{where}:{found.line}: {found.how} {found.module}")
    return offences


def test_every_top_level_package_has_an_audience():
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")}
    assert packages == AUDIENCES, "say in tests/test_layout.py who runs it"


@pytest.mark.parametrize("package", [*SITE, "loadtest"])
def test_nothing_a_site_runs_imports_what_only_developers_and_tests_run(package):
    assert _offences(package) == []


def test_the_check_sees_each_way_of_reaching_the_harness():
    def seen(source: str, module: str = "ops.preflight") -> list[tuple[str, bool, str]]:
        return [
            (i.module, i.in_function, i.how)
            for i in imports_of(source, module)
            if _names(i.module, DEV_ONLY)
        ]

    assert seen("import harness.router") == [("harness.router", False, "import")]
    assert seen("from harness import router") == [
        ("harness", False, "import"),
        ("harness.router", False, "import"),
    ]
    assert seen("def f():\n    from devtools.localstack import LocalStack\n") == [
        ("devtools.localstack", True, "import"),
        ("devtools.localstack.LocalStack", True, "import"),
    ]
    assert seen("ARGS = [sys.executable, '-m', 'devtools', 'dev']") == [
        ("devtools", False, "python -m")
    ]
    # relative imports are resolved: ops/k8s/checks.py's `from ..services import x` is ops's own
    assert seen("from ..services import free_port", "ops.k8s.checks") == []
    assert [i.module for i in imports_of("from . import render", "ops.k8s", True)] == [
        "ops.k8s",
        "ops.k8s.render",
    ]
    assert seen("from tests.support import free_port") == [
        ("tests.support", False, "import"),
        ("tests.support.free_port", False, "import"),
    ]


def test_loadtest_looks_for_the_local_stack_only_inside_a_function():
    inside = "def urls():\n    from devtools.localstack import LocalStack\n"
    at_import = "from devtools.localstack import LocalStack\n"
    elsewhere = "def f():\n    from devtools.sweep import run_sweep\n"
    for name, source in (("inside", inside), ("at_import", at_import), ("elsewhere", elsewhere)):
        found = imports_of(source, f"loadtest.{name}")
        allowed = [
            i.in_function and _names(i.module, LOADTEST_MAY_LOOK_FOR_THE_LOCAL_STACK) for i in found
        ]
        assert all(allowed) == (name == "inside"), name
