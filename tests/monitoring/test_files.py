"""monitoring/ as files: promtool on the config and rules, the dashboards' shape and names."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import yaml

from tests.support import REPO_ROOT

from .helpers import DASHBOARDS, MONITORING, metric_names, panel_queries, rules, tool

PROMETHEUS_DIR = MONITORING / "prometheus"
FIXTURE_METRICS = REPO_ROOT / "tests" / "fixtures" / "vllm-0.32" / "metrics-after-requests.txt"
COUNTERS = MONITORING / "dcgm" / "counters.csv"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120
    )


def test_promtool_accepts_the_config_and_every_rule_file():
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    checked = promtool(
        "check", "rules", *(f"rules/{p.name}" for p in PROMETHEUS_DIR.glob("rules/*.yml"))
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_passes_its_promtool_unit_tests():
    done = promtool("test", "rules", "tests/alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_unit_tested_on_both_sides_of_its_for():
    tests = yaml.safe_load((PROMETHEUS_DIR / "tests" / "alerts_test.yml").read_text())["tests"]
    cases: dict[str, list[bool]] = {}
    for test in tests:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], []).append(bool(case["exp_alerts"]))
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    for alert in alerts:
        assert sorted(set(cases.get(alert, []))) == [False, True], alert


def test_recording_rules_are_named_level_metric_operations():
    for rule in rules():
        if "record" in rule:
            assert re.fullmatch(r"[a-z_]*:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_the_committed_dashboards_are_what_the_builder_writes():
    sys.path.insert(0, str(MONITORING / "grafana"))
    try:
        import build_dashboards
    finally:
        sys.path.pop(0)
    for name, board in build_dashboards.BOARDS.items():
        committed = (MONITORING / "grafana" / "dashboards" / f"{name}.json").read_text()
        assert committed == build_dashboards.render(board), (
            f"{name}.json is stale: python monitoring/grafana/build_dashboards.py"
        )


def test_dashboards_have_unique_uids_and_use_the_provisioned_datasource():
    provisioned = yaml.safe_load(
        (MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    datasource_uids = {d["uid"] for d in provisioned}
    uids = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        uids.append(board["uid"])
        assert board["title"] and board["panels"], path.name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] in datasource_uids, (path.name, panel["title"])
            assert panel["fieldConfig"]["defaults"].get("unit"), (path.name, panel["title"])
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)) and all(refs), (path.name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] in datasource_uids
    assert len(uids) == len(set(uids)) == len(DASHBOARDS) == 5


def test_the_dashboard_provider_points_at_the_mounted_dashboards():
    provider = yaml.safe_load(
        (MONITORING / "grafana" / "provisioning" / "dashboards" / "leave-copilot.yml").read_text()
    )["providers"][0]
    compose = (REPO_ROOT / "deploy" / "compose.yaml").read_text()
    assert f"../monitoring/grafana/dashboards:{provider['options']['path']}:ro" in compose


def used_names() -> set[str]:
    expressions = [q for _, _, q in panel_queries()] + [r["expr"] for r in rules()]
    return {name for expression in expressions for name in metric_names(expression)}


def test_every_vllm_name_used_exists_in_the_real_servers_metrics():
    exposed = set()
    for line in FIXTURE_METRICS.read_text().splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            exposed.add(name)
            exposed |= (
                {f"{name}{s}" for s in ("_bucket", "_sum", "_count")}
                if kind == "histogram"
                else set()
            )
            exposed |= (
                {f"{name}_total"} if kind == "counter" and not name.endswith("_total") else set()
            )
        elif line and not line.startswith("#"):
            exposed.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    used = {name for name in used_names() if name.startswith("vllm:")}
    assert used, "no vLLM metric found in the dashboards and rules"
    assert used - exposed == set()


def test_every_dcgm_name_used_is_collected_and_simulated():
    with COUNTERS.open() as file:
        collected = {
            row[0].strip() for row in csv.reader(file) if row and not row[0].startswith("#")
        }
    used = {name for name in used_names() if name.startswith("DCGM_")}
    assert used and used <= collected
    from modelsim.gpu import BusyClock, SimulatedGpuCollector

    simulated = {family.name for family in SimulatedGpuCollector(BusyClock()).collect()}
    assert simulated == collected  # the stand-in exports exactly the exporter's fields


def test_the_alerts_dashboards_and_load_tests_share_one_service_level():
    """common/slo.py is the one source: the load tests' defaults, the SLO alerts' thresholds
    and the dashboards' SLO lines are its numbers."""
    from common import slo
    from loadtest.settings import LoadSettings

    settings = LoadSettings()
    assert settings.slo_ttft_p99_ms == slo.TTFT_P99_SECONDS * 1000
    assert settings.slo_itl_p99_ms == slo.ITL_P99_SECONDS * 1000
    assert settings.slo_run_p95_ms == slo.RUN_P95_SECONDS * 1000
    alerts = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    ttft, run = alerts["TimeToFirstTokenOverSLO"], alerts["AgentRunLatencyOverSLO"]
    assert (
        ttft["expr"]
        == f"model_name:vllm_time_to_first_token_seconds:p99_rate1m > {slo.TTFT_P99_SECONDS:g}"
    )
    # the working time, not wall time: a run waiting on a person is not a slow service
    assert run["expr"] == f":leave_loop_run_working_seconds:p95_rate1m > {slo.RUN_P95_SECONDS:g}"
    assert ttft["for"] == run["for"] == slo.BREACH_FOR
    lines = {}
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
            lines[panel["title"]] = [step["value"] for step in steps if step["value"] is not None]
    assert lines["Time to first token"] == [slo.TTFT_P99_SECONDS]
    assert lines["Run latency"] == [slo.RUN_P95_SECONDS]
