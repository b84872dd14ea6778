"""What the monitoring tests share: the rule files and dashboards, their queries and metric
names, and the Prometheus tools they are checked with."""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
import yaml

from tests.support import REPO_ROOT

MONITORING = REPO_ROOT / "monitoring"
RULE_FILES = sorted((MONITORING / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((MONITORING / "grafana" / "dashboards").glob("*.json"))
NEEDS_PROMETHEUS = "Debian's prometheus package (promtool, prometheus): apt-get install prometheus"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"no {name}: {NEEDS_PROMETHEUS}")
    return found


def rules() -> list[dict]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expression) for every target of every panel."""
    found = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                found.append((board["uid"], panel["title"], target["expr"]))
    return found


def variable_queries() -> list[tuple[str, str, str]]:
    found = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for variable in board.get("templating", {}).get("list", []):
            found.append((board["uid"], variable["name"], variable["query"]))
    return found


METRIC_NAME = re.compile(r"\b((?:vllm:|DCGM_FI_|leave_)[A-Za-z0-9_:]*)")


def metric_names(expression: str) -> set[str]:
    return set(METRIC_NAME.findall(expression))


# Grafana's variables, as it would substitute them on this stack
VARIABLES = {
    "$__rate_interval": "15s",
    "$__range": "5m",
    "$model": "leave-copilot",
    "$gpu": "0",
    "$replica": "vllm-0",
}


class Live:
    def __init__(self, url: str, services: dict[str, str]) -> None:
        self.url, self.services = url, services

    def query(self, expression: str, at: float | None = None) -> list[dict]:
        for name, value in VARIABLES.items():
            expression = expression.replace(name, value)
        params = {"query": expression, **({"time": str(at)} if at is not None else {})}
        answer = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        body = answer.json()
        assert body.get("status") == "success", (expression, body)
        return body["data"]["result"]
