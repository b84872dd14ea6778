"""What served the load, as the endpoints say it, never as the settings assume: vLLM or the
simulator and its version (GET /version), the served models (GET /v1/models), and the GPUs
(name and count) from the DCGM series' labels in Prometheus, where DCGM reports them.

The cost report reads this block to say whether its capacity is a GPU measurement. vLLM
answers /version with {"version": …}; the simulator adds "simulator" there and owns its models
as "modelsim" (docs/simulator.md); its DCGM series carry simulated="true".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

TIMEOUT_SECONDS = 5.0
# One sample per GPU and exporter: its labels name the model (modelName) and say whether it is
# the simulator's (simulated="true").
GPU_QUERY = "count by (modelName, simulated) (last_over_time(DCGM_FI_DEV_GPU_UTIL[{window}]))"
# The replicas behind the router (each scraped on its own, labelled replica) and the GPUs each
# one serves on (its dcgm-exporter's, or the simulator's for the GPUs it stands for).
REPLICA_QUERY = "count by (replica) (last_over_time(vllm:num_requests_running[{window}]))"
REPLICA_GPU_QUERY = "count by (replica) (last_over_time(DCGM_FI_DEV_GPU_UTIL[{window}]))"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        return json.loads(response.read())


def _problem(url: str, error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"GET {url}: HTTP {error.code}"
    return f"GET {url}: {getattr(error, 'reason', error)}"


def identify(model_url: str) -> dict[str, Any]:
    """The backend block of summary.json, from the model endpoint (`.../v1`)."""
    base = model_url.rstrip("/")
    root = base.removesuffix("/v1")
    backend: dict[str, Any] = {
        "kind": "unknown",  # vllm, simulator or unknown
        "simulated": None,  # True, False, or None when nothing says
        "name": None,
        "version": None,
        "models": [],
        "max_model_len": None,
        "gpu": None,
        "endpoint": model_url,
        "sources": [],
        "notes": [],
    }
    try:
        version = _get(f"{root}/version")
    except (OSError, ValueError) as error:
        backend["notes"].append(_problem(f"{root}/version", error))
    else:
        if isinstance(version, dict) and version.get("simulator"):
            backend |= {"kind": "simulator", "simulated": True, "name": version["simulator"]}
            backend |= {"version": version.get("version"), "profile": version.get("profile")}
        elif isinstance(version, dict) and "version" in version:
            backend |= {"kind": "vllm", "simulated": False, "name": "vllm"}
            backend["version"] = version["version"]
        backend["sources"].append(f"GET {root}/version")
    try:
        models = _get(f"{base}/models")
    except (OSError, ValueError) as error:
        backend["notes"].append(_problem(f"{base}/models", error))
    else:
        data = [m for m in (models or {}).get("data") or [] if isinstance(m, dict)]
        backend["models"] = [str(m.get("id")) for m in data]
        lengths = [m["max_model_len"] for m in data if isinstance(m.get("max_model_len"), int)]
        backend["max_model_len"] = max(lengths, default=None)
        if any(m.get("owned_by") == "modelsim" for m in data):
            backend |= {"kind": "simulator", "simulated": True, "name": "modelsim"}
        backend["sources"].append(f"GET {base}/models")
    return backend


def add_gpus(backend: dict[str, Any], rows: list[dict[str, Any]], source: str) -> None:
    """The GPUs from the DCGM query's rows (GPU_QUERY's answer) into `backend`, in place."""
    gpus = sorted(
        (
            {
                "name": row["metric"].get("modelName") or "unnamed GPU",
                "count": int(float(row["value"][1])),
                "simulated": row["metric"].get("simulated") == "true",
            }
            for row in rows
        ),
        key=lambda gpu: -gpu["count"],
    )
    if not gpus:
        backend["notes"].append(f"{source}: no DCGM series over the run, so no GPU is known")
        return
    backend["gpus"] = gpus
    backend["gpu"] = gpus[0]
    backend["sources"].append(source)
    if any(gpu["simulated"] for gpu in gpus):
        backend["simulated"] = True


def add_replicas(
    backend: dict[str, Any],
    replicas: list[dict[str, Any]],
    gpus: list[dict[str, Any]],
    source: str,
) -> None:
    """How many replicas served (REPLICA_QUERY's rows) and on how many GPUs each
    (REPLICA_GPU_QUERY's), into `backend`, in place: the cost calculator's replica is one of
    these, not the whole set that took the load."""
    names = sorted({row["metric"].get("replica") or "" for row in replicas} - {""})
    if not names:
        backend["notes"].append(f"{source}: no replica label on vLLM's series")
        return
    backend["replicas"] = len(names)
    backend["replica_names"] = names
    per_replica = {row["metric"].get("replica"): int(float(row["value"][1])) for row in gpus}
    counts = {per_replica[name] for name in names if name in per_replica}
    backend["gpus_per_replica"] = max(counts) if counts else None
    if len(counts) > 1:
        backend["notes"].append(f"replicas serve on different GPU counts: {sorted(counts)}")
    backend["sources"].append(source)
