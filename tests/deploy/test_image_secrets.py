"""No secret can reach the image: the build copies code only, a local deploy/.env is outside
the build context, and the Dockerfile bakes in no key, token or password."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

from .image_install import DOCKERFILE, copied_sources

SECRET_NAME = re.compile(r"(KEY|TOKEN|PASSWORD|SECRET)", re.IGNORECASE)


def test_the_build_copies_only_code_and_the_lock():
    sources = copied_sources(DOCKERFILE) + copied_sources(DOCKERFILE, stage="runtime")
    assert set(sources) <= {
        "pyproject.toml",
        "uv.lock",
        "README.md",
        "common",
        "mcp_server",
        "modelsim",
        "loop",
    }, sources


def test_env_files_are_kept_out_of_the_build_context():
    ignored = {
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", "deploy/.env", "deploy"} <= ignored


def test_the_dockerfile_sets_no_secret():
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())  # continuation lines joined
    declared = re.findall(r"^\s*(?:ENV|ARG)\s+(.+)$", text, re.MULTILINE)
    names = [word.split("=")[0] for line in declared for word in line.split() if "=" in word]
    assert names, "the Dockerfile declares ENV/ARG lines; the check must see them"
    assert "UV_LINK_MODE" in names and "PYTHON_IMAGE" in names  # continuations read too
    assert [n for n in names if SECRET_NAME.search(n)] == []
