"""A real Prometheus for the local stack, from the same monitoring/ files compose mounts.

The scrape config names compose's service hostnames; for local processes each job's target
becomes 127.0.0.1 and the port the process listens on, and the rule files are referenced
where they are in the repository. Nothing else changes: the same jobs, rules and alerts.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .compose import REPO_ROOT

MONITORING = REPO_ROOT / "monitoring"
CONFIG = MONITORING / "prometheus" / "prometheus.yml"
INSTALL_HINT = "apt-get install prometheus (Debian/Ubuntu), or a release from prometheus.io"


def binary() -> str | None:
    return shutil.which("prometheus")


def local_config(
    targets: Mapping[str, str], listen: str, scrape_interval: str | None = None
) -> dict[str, Any]:
    """The compose config with each job's target replaced; jobs without one are dropped."""
    config = yaml.safe_load(CONFIG.read_text())
    rules_dir = CONFIG.parent
    config["rule_files"] = [str(rules_dir / pattern) for pattern in config["rule_files"]]
    if scrape_interval:
        config["global"]["scrape_interval"] = scrape_interval
        config["global"]["evaluation_interval"] = scrape_interval
    jobs = []
    for job in config["scrape_configs"]:
        name = job["job_name"]
        target = listen if name == "prometheus" else targets.get(name)
        if target is None:
            continue  # e.g. dcgm: no GPU exporter runs locally
        jobs.append(
            {
                key: value
                for key, value in job.items()
                if key not in ("static_configs", "dns_sd_configs")
            }
            | {"static_configs": [{"targets": [target]}]}
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
