"""vLLM's metric families, names, types, labels and buckets (as served by vLLM 0.32)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

MetricT = TypeVar("MetricT", bound=MetricWrapperBase)

# Buckets exactly as vLLM 0.32 exports them.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def one_two_five_buckets(maximum: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, … up to max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > maximum:
                return tuple(buckets)
            buckets.append(float(value))
        exponent += 1


class VllmMetrics:
    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._label_values = (model_name, "0")
        token_buckets = one_two_five_buckets(max_model_len)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*labels, *extra], registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_cache = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.success = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("finished_reason",),
        )
        self.prompt_hist = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.generation_hist = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.max_tokens_hist = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            token_buckets,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        # vLLM labels this one without `engine`.
        self.tool_parser = Counter(
            "vllm:tool_call_parser_invocations",
            "Total number of ToolParser invocations. Non-streaming increments once per choice; "
            "streaming increments once per delta.",
            ["model_name", "mode", "outcome", "request_type"],
            registry=r,
        )
        self.http_requests = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ["handler", "method", "status"],
            registry=r,
        )

        # vLLM exports every family from the start, zero-valued: create each labelled child.
        for metric in (
            self.running, self.waiting, self.kv_cache, self.prompt_tokens, self.generation_tokens,
            self.prefix_queries, self.prefix_hits, self.preemptions, self.prompt_hist,
            self.generation_hist, self.max_tokens_hist, self.ttft, self.itl, self.tpot, self.e2e,
            self.queue, self.inference, self.prefill, self.decode,
        ):  # fmt: skip
            metric.labels(*self._label_values)
        for reason in FINISHED_REASONS:
            self.success.labels(*self._label_values, reason)
        for mode in ("streaming", "non_streaming"):
            for outcome in ("tool_call", "no_tool_call"):
                for request_type in ("chat_completions", "responses", "other"):
                    self.tool_parser.labels(model_name, mode, outcome, request_type)
        self.model_name = model_name

    def child(self, metric: MetricT) -> MetricT:
        return metric.labels(*self._label_values)

    def bind_gauges(
        self, running: Callable[[], float], waiting: Callable[[], float], kv: Callable[[], float]
    ) -> None:
        self.child(self.running).set_function(running)
        self.child(self.waiting).set_function(waiting)
        self.child(self.kv_cache).set_function(kv)

    def parser_invocation(self, streaming: bool, tool_call: bool, times: int = 1) -> None:
        self.tool_parser.labels(
            self.model_name,
            "streaming" if streaming else "non_streaming",
            "tool_call" if tool_call else "no_tool_call",
            "chat_completions",
        ).inc(times)
