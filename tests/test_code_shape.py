"""The application factories stay readable: no function in loop/app.py or mcp_server/app.py
longer than 80 lines (issue 32). A longer one is split into pieces that do one job each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

MAX_LINES = 80
FACTORIES = ("loop/app.py", "mcp_server/app.py")


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """Each function (nested ones too) longer than `limit` lines, decorators included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append((node.name, length))
    return found


@pytest.mark.parametrize("path", FACTORIES)
def test_no_function_in_the_factories_is_longer_than_80_lines(path):
    assert long_functions((Path(REPO_ROOT) / path).read_text(encoding="utf-8")) == []


def test_the_check_finds_a_long_function_and_passes_a_short_one():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # 80 + the def line
    assert long_functions(f"def long():\n{body}") == [("long", MAX_LINES + 1)]
    assert long_functions(f"def fits():\n{body[: body.rindex('    x')]}") == []
    nested = "def outer():\n    def inner():\n" + body.replace("    ", "        ")
    assert ("inner", MAX_LINES + 1) in long_functions(nested)
