"""The README and docs/ hold together: links resolve, and the README keeps what a newcomer needs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ops.compose import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).+?\1")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (links and headings there are only text)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def links(page: Path) -> list[str]:
    found = []
    for line in prose_lines(page.read_text()):
        line = CODE_SPAN.sub("", line)  # `[x](y)` inside a code span is not a link
        found += INLINE_LINK.findall(line)
        found += REFERENCE_LINK.findall(line)
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lowercase, punctuation dropped, spaces → '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text()):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            # GitHub numbers repeated headings: name, name-1, name-2 …
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def test_slug_follows_githubs_rules():
    assert slug("Deployment (`deploy/.env`)") == "deployment-deployenv"
    assert slug("What `make up` does") == "what-make-up-does"
    assert slug("Tests and benchmarks") == "tests-and-benchmarks"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_points_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: …
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert broken == [], broken


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_readme_links_every_docs_page():
    listed = set(re.findall(r"\]\(docs/([^)#]+)", section(README.read_text(), "Documentation")))
    assert listed == {page.name for page in DOCS.glob("*.md")}


def test_the_quickstart_keeps_its_two_commands():
    # CI runs the second command (.ci/run) and tests/deploy/test_demo.py the first.
    block = re.search(r"```bash\n(.*?)```", section(README.read_text(), "Quickstart"), re.DOTALL)
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_every_documented_make_target_is_in_the_readme():
    makefile = (REPO_ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-zA-Z_-]+):.*## ", makefile, re.MULTILINE)
    readme = README.read_text()
    assert [t for t in targets if f"`make {t}`" not in readme] == []


def test_every_service_setting_is_in_the_configuration_page():
    from loadtest.cost.settings import CalculatorSettings
    from loadtest.settings import LoadSettings
    from loop.settings import LoopSettings
    from mcp_server.settings import ServerSettings
    from modelsim.settings import SimSettings

    page = (DOCS / "configuration.md").read_text()
    listed = set(re.findall(r"^\|[^|]*", page, re.MULTILINE))
    variables = {v for row in listed for v in re.findall(r"`([A-Z][A-Z0-9_]*)`", row)}
    missing = [
        cls.model_config["env_prefix"] + name.upper()
        for cls in (LoopSettings, ServerSettings, SimSettings, LoadSettings, CalculatorSettings)
        for name in cls.model_fields
        if cls.model_config["env_prefix"] + name.upper() not in variables
    ]
    assert missing == []


def test_every_published_port_setting_is_in_the_readme():
    """PROMETHEUS_PUBLISHED_PORT moved the local Prometheus, and the README did not say so."""
    compose_files = sorted((REPO_ROOT / "deploy").glob("compose*.yaml"))
    settings = {
        name
        for path in compose_files
        for name in re.findall(r"\b[A-Z]+_PUBLISHED_PORT\b", path.read_text())
    }
    assert "PROMETHEUS_PUBLISHED_PORT" in settings  # the pattern still finds them
    readme = README.read_text()
    assert sorted(name for name in settings if f"`{name}`" not in readme) == []


def test_the_readme_says_every_port_that_moves_the_local_stack():
    """`make dev` says a port is in use: the README listed LOOP_, MCP_PUBLISHED_PORT and
    LOCAL_MODEL_PORT, but the local Prometheus (devtools/prometheus.py) moves with its own."""
    import yaml

    services = yaml.safe_load((REPO_ROOT / "deploy" / "compose.yaml").read_text())["services"]
    local = ("loop", "mcp-server", "prometheus")  # what `make dev` runs from these files
    moving = {"LOCAL_MODEL_PORT"} | {
        name
        for service in local
        for port in services[service].get("ports", [])
        for name in re.findall(r"\$\{([A-Z_]+_PUBLISHED_PORT)", str(port))
    }
    assert "PROMETHEUS_PUBLISHED_PORT" in moving
    bullet = README.read_text().split("move the local\n  stack with", 1)[1].split("\n- **", 1)[0]
    assert sorted(name for name in moving if f"`{name}`" not in bullet) == []
