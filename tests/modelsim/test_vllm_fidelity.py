"""Shapes and metrics compared with what a real vLLM 0.32 server sent (tests/fixtures/vllm-0.32)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import LEAVE_TOOLS, SEED_REQUEST

CAPTURED = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-0.32"
BODY = {
    "model": "leave-copilot",
    "messages": [{"role": "user", "content": SEED_REQUEST}],
    "tools": LEAVE_TOOLS,
}
# The families a dashboard needs; the simulator must export each exactly as vLLM does.
FAMILIES = [
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_params_max_tokens",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:request_success",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:tool_call_parser_invocations",
]
DEPRECATED = [
    "vllm:gpu_cache_usage_perc",
    "vllm:time_per_output_token_seconds",
    "vllm:gpu_prefix_cache",
    "vllm:num_requests_swapped",
    "vllm:cpu_cache_usage_perc",
]


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def shape(family) -> dict[str, object]:
    """Type, label names, and (for histograms) bucket bounds of one family."""
    labels = set()
    buckets = set()
    for sample in family.samples:
        labels |= set(sample.labels) - {"le"}
        if sample.name.endswith("_bucket"):
            buckets.add(sample.labels["le"])
    return {"type": family.type, "labels": labels, "buckets": buckets}


def keys(value: object) -> object:
    """The structure of a JSON value: dict keys recursively, list items by their first."""
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return type(value).__name__


@pytest.fixture(scope="module")
def exercised_metrics(sim_url) -> str:
    with httpx.Client() as http:
        for stream in (False, True):
            http.post(
                f"{sim_url}/v1/chat/completions", json={**BODY, "stream": stream}
            ).raise_for_status()
        return http.get(f"{sim_url}/metrics").text


@pytest.mark.parametrize("name", FAMILIES)
def test_metric_family_matches_vllm(exercised_metrics, name):
    real = families((CAPTURED / "metrics-idle.txt").read_text())
    ours = families(exercised_metrics)
    assert name in real, f"{name} is not a vLLM 0.32 family"
    assert name in ours, f"simulator does not export {name}"
    assert shape(ours[name]) == shape(real[name])


def test_no_deprecated_metric_names(exercised_metrics):
    for old in DEPRECATED:
        assert old not in exercised_metrics


def test_metrics_count_what_was_served(exercised_metrics):
    ours = families(exercised_metrics)

    def value(name: str, **labels: str) -> float:
        return sum(
            s.value
            for s in ours[name].samples
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("vllm:request_success", finished_reason="stop") == 2
    assert (
        value("vllm:tool_call_parser_invocations", mode="non_streaming", outcome="tool_call") == 1
    )
    assert value("vllm:tool_call_parser_invocations", mode="streaming", outcome="tool_call") > 5
    assert value("vllm:prompt_tokens") > 0 and value("vllm:generation_tokens") > 0


def test_non_streaming_response_has_vllms_fields(sim_url):
    real = json.loads((CAPTURED / "chat-toolcall-nonstream.json").read_text())
    ours = httpx.post(f"{sim_url}/v1/chat/completions", json=BODY).json()
    real_message = real["choices"][0]["message"]
    our_message = ours["choices"][0]["message"]
    assert set(our_message) <= set(real_message)
    assert keys(our_message["tool_calls"]) == keys(real_message["tool_calls"])
    assert set(ours["usage"]) <= set(real["usage"])
    assert {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"} <= set(
        ours
    )
    assert ours["object"] == real["object"]
    assert our_message["content"] == real_message["content"] == ""


def _events(text: str) -> list[object]:
    return [
        json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]"
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


def test_tool_call_stream_has_vllms_chunk_sequence(sim_url):
    real = _events((CAPTURED / "chat-toolcall-stream.sse").read_text())
    ours = _events(
        httpx.post(
            f"{sim_url}/v1/chat/completions",
            json={**BODY, "stream": True, "stream_options": {"include_usage": True}},
        ).text
    )

    def kinds(events: list[object]) -> list[str]:
        out = []
        for event in events:
            if event == "[DONE]":
                out.append("done")
            elif not event["choices"]:
                out.append("usage")
            else:
                delta = event["choices"][0]["delta"]
                if "role" in delta:
                    out.append("role")
                elif delta.get("tool_calls") and "id" in delta["tool_calls"][0]:
                    out.append("tool_start")
                elif delta.get("tool_calls"):
                    out.append("args")
                else:
                    out.append("finish")
        # collapse runs of argument fragments
        return [k for i, k in enumerate(out) if k != "args" or out[i - 1] != "args"]

    assert kinds(ours) == kinds(real) == ["role", "tool_start", "args", "finish", "usage", "done"]
    for index in (1, 2, -3, -2):
        assert keys(ours[index]) == keys(real[index]), index
