"""A real Prometheus with compose's vLLM scrape job, its targets as a two-replica layout lists
them, neither name resolving here (as a stopped container's name does not on compose's
network): both stay targets that are down, and ModelServerDown goes pending for each. With DNS
discovery, as before, a name that does not resolve gave no target and the alert nothing."""

from __future__ import annotations

import httpx
import yaml

from devtools import prometheus
from ops import layout
from tests.support import free_port, running, wait_until

from .helpers import tool


def test_replicas_that_do_not_resolve_are_down_and_alerted(tmp_path):
    tool("prometheus")
    config = yaml.safe_load(prometheus.CONFIG.read_text())
    config.pop("alerting", None)
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(prometheus.CONFIG.parent / p) for p in config["rule_files"]]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "vllm")
    config["scrape_configs"] = [job]
    targets = tmp_path / "vllm-replicas.yml"
    two = layout.plan({"VLLM_GPUS": "2"})
    # the layout's names, unresolvable on this host
    targets.write_text(layout.prometheus_targets(two).replace(":8000", ".invalid:8000"))
    for discovery in job.get("file_sd_configs", []):
        discovery["files"] = [str(targets)]
        discovery["refresh_interval"] = "1s"
    path = prometheus.write_config(tmp_path / "prometheus.yml", config)
    listen = f"127.0.0.1:{free_port()}"
    command = prometheus.command(path, tmp_path / "tsdb", listen)

    def query(expression: str) -> dict[str, str]:
        answer = httpx.get(f"http://{listen}/api/v1/query", params={"query": expression})
        return {r["metric"]["replica"]: r["value"][1] for r in answer.json()["data"]["result"]}

    with running([], {}, tmp_path / "prometheus.log", f"http://{listen}/-/ready", argv=command):
        wait_until(
            lambda: query('up{job="vllm"}') == {"vllm-0": "0", "vllm-1": "0"},
            timeout=30,
            what="both listed replicas as targets that are down",
        )
        wait_until(
            lambda: set(query('ALERTS{alertname="ModelServerDown"}')) == {"vllm-0", "vllm-1"},
            timeout=30,
            what="ModelServerDown pending for each",
        )
