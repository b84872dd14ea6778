"""Each step's window as the servers saw it: GPU busy, vLLM's TTFT p95 and KV-cache use, read
from Prometheus's HTTP API and put beside the client-side figures in summary.json.

The expressions are the recording rules' (monitoring/prometheus/rules/recording.yml) with the
rule's 1 m window replaced by the step's own, evaluated at the step's end. A Prometheus that
is not set, not answering or without the series leaves the figures null with a note: the
load test's own numbers never depend on it.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from . import backend, target

TIMEOUT_SECONDS = 5.0
# After the run Prometheus still has to scrape its last seconds: wait at most this long (two
# of the bundle's 5 s scrapes and some slack) for a sample at or after the run's end.
SCRAPE_WAIT_SECONDS = 15.0
# The series every scrape of vLLM (or the simulator) has; its newest sample says how far the
# scrapes have got.
FRESHNESS_SERIES = "vllm:num_requests_running"


@dataclass(frozen=True)
class Figure:
    expression: str  # {window} is the step's length
    scale: float  # the series' unit → the field's
    rule: str | None  # the recording rule whose expression this is, over the step's window


FIGURES = {
    # the mean of dcgm-exporter's (or the simulator's) utilisation gauge over the step
    "gpu_util_percent_mean": Figure("avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{window}]))", 1, None),
    # the share of time a kernel ran, which the recording rules prefer (profiling field)
    "gpu_busy_mean": Figure(
        "avg(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{window}]))", 1, ":dcgm_gpu_busy:avg1m"
    ),
    "vllm_ttft_p95_ms": Figure(
        "histogram_quantile(0.95, sum by (le) "
        "(rate(vllm:time_to_first_token_seconds_bucket[{window}])))",
        1000,
        "model_name:vllm_time_to_first_token_seconds:p95_rate1m",
    ),
    "kv_cache_usage_max": Figure(
        "max(max_over_time(vllm:kv_cache_usage_perc[{window}]))",
        1,
        "model_name:vllm_kv_cache_usage_perc:max",
    ),
    # prompt tokens served from vLLM's prefix cache ÷ prompt tokens looked up, over the step:
    # what the fine-tune's own cache shares of the prompts the records say repeat
    "prefix_cache_hit_rate": Figure(
        "sum(increase(vllm:prefix_cache_hits_total[{window}])) / "
        "sum(increase(vllm:prefix_cache_queries_total[{window}]))",
        1,
        None,
    ),
}


class PrometheusError(Exception):
    def __init__(self, message: str, passing: bool = False) -> None:
        super().__init__(message)
        # may pass if asked again: not ready yet (503), a timeout, a name server not answering
        self.passing = passing


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def query(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expression, **({"time": f"{at:.3f}"} if at is not None else {})}
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=TIMEOUT_SECONDS) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode(errors="replace")
            raise PrometheusError(f"HTTP {error.code}: {detail}", error.code == 503) from None
        except (OSError, ValueError) as error:  # refused, timed out, not JSON
            reason = getattr(error, "reason", error)
            raise PrometheusError(str(reason), target.passing(reason)) from None
        if body.get("status") != "success":
            raise PrometheusError(str(body.get("error") or body)[:300])
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expression: str, at: float | None = None) -> float | None:
        """The first series' value; None when there is none."""
        result = self.query(expression, at)
        return float(result[0]["value"][1]) if result else None

    def wait_for_scrape_after(self, moment: float, timeout: float) -> str | None:
        """Wait until a scrape at or after `moment` is stored; what went short, if anything."""
        newest = f"max(timestamp({FRESHNESS_SERIES}))"
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            try:
                latest = self.value(newest)
            except PrometheusError as error:
                if not error.passing or time.monotonic() >= deadline:
                    raise
                pause.wait(0.5)
                continue
            if latest is None:
                return f"Prometheus has no {FRESHNESS_SERIES}: does it scrape vLLM?"
            if latest >= moment:
                return None
            if time.monotonic() >= deadline:
                return (
                    f"no scrape at or after the run's end within {timeout:g} s: the last "
                    "step's figures may miss its last seconds"
                )
            pause.wait(0.25)


def empty(note: str) -> dict[str, Any]:
    return {**dict.fromkeys(FIGURES), "notes": [note]}


def window(seconds: float) -> str:
    # PromQL durations are whole numbers of a unit: milliseconds keep the step's length
    return f"{max(1, round(seconds * 1000))}ms"


def step_figures(prometheus: Prometheus, start: float, end: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    notes: list[str] = []
    for name, figure in FIGURES.items():
        expression = figure.expression.format(window=window(end - start))
        try:
            value = prometheus.value(expression, at=end)
        except PrometheusError as error:
            figures[name] = None
            notes.append(f"{name}: the query failed: {error}")
            continue
        if value is None:
            notes.append(f"{name}: no samples in the step's window")
        elif math.isnan(value):  # a quantile of no requests is 0/0
            value = None
            notes.append(f"{name}: no requests in the step's window")
        figures[name] = None if value is None else value * figure.scale
    return {**figures, "notes": notes}


def add_figures(
    summary: dict[str, Any],
    url: str | None,
    unset_note: str,
    wait_seconds: float = SCRAPE_WAIT_SECONDS,
) -> dict[str, Any]:
    """Put each step's Prometheus figures in `summary` (in place) and describe the source.
    Prometheus is waited for up to `wait_seconds` while it is not ready or its name does not
    resolve for the moment, and until it has scraped the run's last seconds."""
    steps = summary["steps"]
    queries = {name: f.expression for name, f in FIGURES.items()}
    rules = {name: f.rule for name, f in FIGURES.items()}
    summary["prometheus"] = {"url": url, "queries": queries, "recording_rules": rules}
    found = summary.get("backend")
    if url is None:
        for step in steps:
            step["prometheus"] = empty(unset_note)
        if found is not None:
            found["notes"].append(f"{unset_note}, so the GPUs were not read from DCGM")
        return summary
    prometheus = Prometheus(url)
    try:
        end = max((step["end"] for step in steps), default=0.0)
        short = prometheus.wait_for_scrape_after(end, wait_seconds) if steps else None
        if short:
            summary["prometheus"]["note"] = short
    except PrometheusError as error:
        note = f"Prometheus at {url} did not answer: {error}"
        summary["prometheus"]["note"] = note
        for step in steps:
            step["prometheus"] = empty(note)
        if found is not None:
            found["notes"].append(f"{note}, so the GPUs were not read from DCGM")
        return summary
    for step in steps:
        step["prometheus"] = step_figures(prometheus, step["start"], step["end"])
    if found is not None and steps:
        start = min(step["start"] for step in steps)
        gpus = backend.GPU_QUERY.format(window=window(end - start))
        source = f"DCGM_FI_DEV_GPU_UTIL labels via Prometheus at {url}"
        try:
            backend.add_gpus(found, prometheus.query(gpus, at=end), source)
        except PrometheusError as error:
            found["notes"].append(f"{source}: the query failed: {error}")
        span = window(end - start)
        source = f"the replica label of vLLM's and DCGM's series via Prometheus at {url}"
        try:
            backend.add_replicas(
                found,
                prometheus.query(backend.REPLICA_QUERY.format(window=span), at=end),
                prometheus.query(backend.REPLICA_GPU_QUERY.format(window=span), at=end),
                source,
            )
        except PrometheusError as error:
            found["notes"].append(f"{source}: the query failed: {error}")
    return summary


def resolve(setting: str) -> tuple[str | None, str]:
    """(the Prometheus to read, or None; why none). LOAD_PROMETHEUS_URL empty means the local
    stack's (`make dev`) while it runs; `off` means none."""
    if setting.strip().lower() == "off":
        return None, "no Prometheus figures: LOAD_PROMETHEUS_URL=off"
    if setting.strip():
        return setting.strip(), ""
    from devtools.prometheus import running_local_url

    local = running_local_url()
    if local is None:
        return None, (
            "no Prometheus figures: LOAD_PROMETHEUS_URL is not set and the local stack "
            "(make dev) runs no Prometheus"
        )
    return local, ""
