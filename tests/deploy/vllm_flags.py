"""The flags of the vLLM version the bundle pins, as its own `vllm serve --help=all` printed them."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

SERVE_HELP = REPO_ROOT / "tests" / "fixtures" / "vllm-0.32" / "serve-help.txt"


def recorded_flags() -> tuple[set[str], set[str]]:
    """(every flag, every --tool-call-parser choice) from vLLM 0.32's `--help=all`."""
    text = SERVE_HELP.read_text()
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    parsers = re.search(r"--tool-call-parser \{([^}]*)\}", text).group(1).split(",")
    return flags, set(parsers)
