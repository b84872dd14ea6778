"""What a Python source imports, read with ast (never by importing it): the layout test's who
may import whom, and the suite's own rule that a test module imports no other."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    module: str  # absolute, relative imports resolved
    line: int
    in_function: bool
    how: str  # "import" or "python -m"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every module `source` (the module `module`) imports, and every `-m` it starts."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    inside: set[int] = set()  # ids of nodes within a function body
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node in ast.walk(tree):
        nested = id(node) in inside
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno, nested, "import") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from x import y` may name a module y: count both
            found.append(Import(base, node.lineno, nested, "import"))
            found += [
                Import(f"{base}.{alias.name}", node.lineno, nested, "import")
                for alias in node.names
                if alias.name != "*"
            ]
        elif isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for index, word in enumerate(words[:-1]):
                target = words[index + 1]
                if word == "-m" and isinstance(target, str):
                    found.append(Import(target, node.lineno, nested, "python -m"))
    return found
