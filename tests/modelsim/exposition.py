"""Reading a Prometheus exposition page the way the vLLM fidelity tests compare one: the
families a dashboard needs, a family's shape, one sample's value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

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


def shape(family) -> dict[str, object]:
    """Type, label names, and (for histograms) bucket bounds of one family."""
    labels = set()
    buckets = set()
    for sample in family.samples:
        labels |= set(sample.labels) - {"le"}
        if sample.name.endswith("_bucket"):
            buckets.add(sample.labels["le"])
    return {"type": family.type, "labels": labels, "buckets": buckets}


def sample_value(text: str, name: str, **labels: str) -> float:
    """One sample's value (summed over series matching `labels`) from an exposition page."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )
