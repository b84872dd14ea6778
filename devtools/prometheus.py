"""A real Prometheus for the local stack, from the same monitoring/ files compose mounts.

The scrape config names compose's service hostnames; for local processes each job's target
becomes 127.0.0.1 and the port the process listens on, and the rule files are referenced
where they are in the repository. Nothing else changes: the same jobs, rules and alerts.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from ops.compose import REPO_ROOT, host_ports

from .localstack import LocalService

MONITORING = REPO_ROOT / "monitoring"
CONFIG = MONITORING / "prometheus" / "prometheus.yml"
INSTALL_HINT = "apt-get install prometheus (Debian/Ubuntu), or a release from prometheus.io"


def binary() -> str | None:
    return shutil.which("prometheus")


# A job's local targets: one "host:port", or (host:port, its labels) for each of several.
Targets = str | list[tuple[str, dict[str, str]]]


def local_config(
    targets: Mapping[str, Targets],
    listen: str,
    scrape_interval: str | None = None,
    alertmanager: str | None = None,
) -> dict[str, Any]:
    """The compose config with each job's targets replaced; jobs without one are dropped. A
    `vllm` job given one target labels it replica vllm-0, as compose's replica names would.
    Alerts go to `alertmanager` (host:port), or, without one, nowhere."""
    config: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    if alertmanager is None:
        config.pop("alerting", None)
    else:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    rules_dir = CONFIG.parent
    config["rule_files"] = [str(rules_dir / pattern) for pattern in config["rule_files"]]
    if scrape_interval:
        config["global"]["scrape_interval"] = scrape_interval
        config["global"]["evaluation_interval"] = scrape_interval
    jobs = []
    for job in config["scrape_configs"]:
        name = job["job_name"]
        given = [(listen, {})] if name == "prometheus" else targets.get(name)
        if given is None:
            continue  # e.g. dcgm: no GPU exporter runs locally
        if isinstance(given, str):
            given = [(given, {"replica": "vllm-0"} if name == "vllm" else {})]
        static = [
            {"targets": [target], **({"labels": labels} if labels else {})}
            for target, labels in given
        ]
        jobs.append(
            {
                key: value
                for key, value in job.items()
                if key not in ("static_configs", "dns_sd_configs", "file_sd_configs")
            }
            | {"static_configs": static}
        )
    config["scrape_configs"] = jobs
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def command(config_path: Path, data_dir: Path, listen: str) -> list[str]:
    found = binary()
    if found is None:
        raise FileNotFoundError(f"no prometheus binary: {INSTALL_HINT}")
    return [
        found,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={listen}",
        "--storage.tsdb.retention.time=1d",
    ]


def check_config(config_path: Path) -> str:
    """'' when promtool accepts the config (and the rule files it names), else its words."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ""
    done = subprocess.run(
        [promtool, "check", "config", str(config_path)], capture_output=True, text=True
    )
    return "" if done.returncode == 0 else (done.stdout + done.stderr).strip()


def local_service(
    project: dict[str, Any], services: list[LocalService], run_dir: Path
) -> LocalService | None:
    """The local stack's Prometheus, or None when no binary is installed.

    Its port is compose's published Prometheus port; its config is written under run_dir.
    """
    if binary() is None:
        return None
    published = [
        host_ports(p["published"])[0]
        for p in project["services"]["prometheus"].get("ports", [])
        if p.get("published")
    ]
    listen = f"127.0.0.1:{published[0] if published else 9090}"
    targets: dict[str, Targets] = {}
    for service in services:
        for job, port in service.metrics.items():
            labels = {"replica": service.name} if job == "vllm" else {}
            listed = targets.setdefault(job, [])
            assert isinstance(listed, list)
            listed.append((f"127.0.0.1:{port}", labels))
    # 2 s: the demo's few seconds of traffic then have enough samples to read back
    config = write_config(
        run_dir / "prometheus" / "prometheus.yml", local_config(targets, listen, "2s")
    )
    port = int(listen.rsplit(":", 1)[1])
    return LocalService(
        "prometheus",
        command(config, run_dir / "prometheus" / "data", listen),
        {},
        port,
        port,
        "/-/ready",
    )


def running_local_url(run_dir: Path | None = None) -> str | None:
    """The URL of the local stack's Prometheus (`make dev`) while it runs, else None."""
    from .localstack import RUN_DIR, LocalStack

    local = LocalStack(run_dir or RUN_DIR)
    if "prometheus" not in local.running():
        return None
    command = (local.pids / "prometheus.pid").read_text().splitlines()[1]
    for argument in command.split():
        if argument.startswith("--web.listen-address="):
            return f"http://{argument.split('=', 1)[1]}"
    return None


def query(url: str, expression: str) -> float | None:
    """One instant value, or None when the query has no data."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=5).json()
    result = answer.get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else None


def print_demo_figures(
    prometheus_url: str, loop_url: str, engine_urls: list[str], timeout: float = 20
) -> None:
    """A few of the demo's own figures, read back from Prometheus once it has scraped them
    (`engine_urls`: each replica's, whose metrics the router's answers come from)."""

    def own_total(url: str, metric: str) -> float:
        lines = httpx.get(f"{url}/metrics", timeout=5).text.splitlines()
        return sum(float(line.split()[-1]) for line in lines if line.startswith(metric))

    # each job is scraped on its own schedule: wait until both have the demo's final counts
    expected = {
        "sum(leave_loop_runs_total)": own_total(loop_url, "leave_loop_runs_total"),
        "sum(vllm:generation_tokens_total)": sum(
            own_total(url, "vllm:generation_tokens_total") for url in engine_urls
        ),
    }
    deadline, pause = time.monotonic() + timeout, threading.Event()
    while any(query(prometheus_url, q) != v for q, v in expected.items()):
        if time.monotonic() > deadline:
            print(f"\nPrometheus had not scraped the demo's figures after {timeout:.0f} s")
            return
        pause.wait(0.5)
    # cumulative since the stack started, which for the demo's fresh stack is the demo
    figures = {
        "TTFT p95 (model)": (
            "histogram_quantile(0.95, sum by (le) (vllm:time_to_first_token_seconds_bucket))",
            "{:.0f} ms",
            1000,
        ),
        "generated tokens": ("sum(vllm:generation_tokens_total)", "{:.0f}", 1),
        "completed runs": ('sum(leave_loop_runs_total{status="completed"})', "{:.0f}", 1),
        "run latency p95": (  # the SLO's: without the time people took to confirm
            "histogram_quantile(0.95, sum by (le) (leave_loop_run_working_seconds_bucket))",
            "{:.2f} s",
            1,
        ),
    }
    print(f"\nRead back from Prometheus ({prometheus_url}):")
    for name, (expression, form, scale) in figures.items():
        value = query(prometheus_url, expression)
        print(f"  {name:<18} {form.format(value * scale) if value is not None else 'no data'}")
