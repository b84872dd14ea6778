"""vLLM's metric families, names, types, labels and buckets (as served by vLLM 0.32)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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
ITERATION_TOKEN_BUCKETS = (
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
)  # fmt: skip
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# Label values vLLM 0.32 creates up front (tests/fixtures/vllm-0.32/metrics-idle.txt).
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REJECTION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
# The share of GPU memory the gpu profile's KV capacity was derived with (modelsim/latency.py).
GPU_MEMORY_UTILIZATION = 0.9


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


@dataclass(frozen=True)
class PromptSources:
    """Where one request's prompt KV came from, counted as vLLM counts it."""

    cached: int  # served from the prefix cache: `prefix_cache_hits`, `prompt_tokens_cached`
    local_compute: int  # prefilled: the prompt minus the cached tokens
    local_cache_hit: int  # `source="local_cache_hit"`: the cached tokens


def prompt_sources(prompt_tokens: int, cached_tokens: int) -> PromptSources:
    """Split a prompt of which the first `cached_tokens` came from the prefix cache.

    vLLM 0.32 records the prefix-cache hit once for all three (`PrefillStats.set`): computed +
    local_cache_hit = the prompt, local_cache_hit = the hits. The cache never reuses the last
    prompt token (the model needs one input to sample from), so at most prompt − 1 are cached.
    """
    cached = max(min(cached_tokens, prompt_tokens - 1), 0)
    return PromptSources(cached, prompt_tokens - cached, cached)


def cache_config_labels(
    kv_cache_tokens: int, max_model_len: int, block_size: int, user_specified_block_size: bool
) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels: the simulator's own capacity and block size, else
    what vLLM 0.32 reports for a dense model with prefix caching on and no offloading."""
    return {
        "_block_size_resolved": "True",
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": str(GPU_MEMORY_UTILIZATION),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(kv_cache_tokens / max_model_len),
        # the flag is unset: the capacity follows from gpu_memory_utilization
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(kv_cache_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(kv_cache_tokens // block_size),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": str(user_specified_block_size),
    }


class VllmMetrics:
    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        kv_cache_tokens: int,
        block_size: int,
        user_specified_block_size: bool = False,
    ) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._label_values = (model_name, "0")
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        token_buckets = one_two_five_buckets(max_model_len)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*labels, *extra], registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        def by(metric: type[MetricT], name: str, doc: str, label: str) -> MetricT:
            return metric(name, doc, [*labels, label], registry=r)

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
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Tokens (prompt and generated) handled per engine step.",
            ITERATION_TOKEN_BUCKETS,
        )
        self.max_generation_hist = histogram(
            "vllm:request_max_num_generation_tokens",
            "Per request, the most tokens generated by any of its n sequences.",
            token_buckets,
        )
        self.n_hist = histogram(
            "vllm:request_params_n", "The n (sequences per request) parameter.", PARAMS_N_BUCKETS
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Times each request was preempted before it finished.",
            PREEMPTION_BUCKETS,
        )
        self.prefill_kv_hist = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Per request, prompt tokens whose KV was computed in prefill (cached ones excluded).",
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
        self.waiting_by_reason = by(
            Gauge,
            "vllm:num_requests_waiting_by_reason",
            "Waiting requests by why they wait: 'capacity' for a free running slot, 'deferred' "
            "for a transient constraint. The reasons add up to vllm:num_requests_waiting.",
            "reason",
        )
        self.sleep_state = by(
            Gauge,
            "vllm:engine_sleep_state",
            "Engine sleep state, one series per state: awake = 1 while serving; "
            "weights_offloaded = 1 at sleep level 1; discard_all = 1 at sleep level 2.",
            "sleep_state",
        )
        self.prompt_by_source = by(
            Counter,
            "vllm:prompt_tokens_by_source",
            "Prompt tokens by where their KV came from.",
            "source",
        )
        self.prompt_cached = counter(
            "vllm:prompt_tokens_cached",
            "Prompt tokens whose KV was reused from a cache (local or external).",
        )
        self.prompt_cached_by_source = by(
            Counter,
            "vllm:prompt_tokens_cached_by_source",
            "Prompt tokens reused from a cache, by the tier that held them (device, host, p2p, "
            "disk, external_unspecified); they add up to the local and external prefix cache hits.",
            "source",
        )
        self.external_prefix_queries = counter(
            "vllm:external_prefix_cache_queries",
            "Tokens looked up in a KV connector's cache shared across instances.",
        )
        self.external_prefix_hits = counter(
            "vllm:external_prefix_cache_hits",
            "Tokens found in a KV connector's cache shared across instances.",
        )
        self.mm_queries = counter(
            "vllm:mm_cache_queries", "Multi-modal items looked up in the multi-modal cache."
        )
        self.mm_hits = counter(
            "vllm:mm_cache_hits", "Multi-modal items found in the multi-modal cache."
        )
        self.flops = counter(
            "vllm:estimated_flops_per_gpu",
            "Estimated floating-point operations per GPU, for model FLOPs utilisation.",
        )
        self.read_bytes = counter(
            "vllm:estimated_read_bytes_per_gpu",
            "Estimated bytes read from GPU memory, for model FLOPs utilisation.",
        )
        self.write_bytes = counter(
            "vllm:estimated_write_bytes_per_gpu",
            "Estimated bytes written to GPU memory, for model FLOPs utilisation.",
        )
        # vLLM counts these in the API server, which has no `engine` label.
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Requests refused because a queue limit was reached, by the limit.",
            ["model_name", "reason"],
            registry=r,
        )
        # vLLM labels this one with `engine` only; an info gauge whose labels are the settings.
        cache_config = cache_config_labels(
            kv_cache_tokens, max_model_len, block_size, user_specified_block_size
        )
        self.cache_config = Gauge(
            "vllm:cache_config_info",
            "The KV cache configuration, as labels of a constant 1.",
            list(cache_config),
            registry=r,
        )
        self.cache_config.labels(**cache_config).set(1)
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
            self.queue, self.inference, self.prefill, self.decode, self.iteration_tokens,
            self.max_generation_hist, self.n_hist, self.request_preemptions,
            self.prefill_kv_hist, self.prompt_cached, self.external_prefix_queries,
            self.external_prefix_hits, self.mm_queries, self.mm_hits, self.flops,
            self.read_bytes, self.write_bytes,
        ):  # fmt: skip
            metric.labels(*self._label_values)
        for reason in FINISHED_REASONS:
            self.success.labels(*self._label_values, reason)
        for reason in WAITING_REASONS:
            self.waiting_by_reason.labels(*self._label_values, reason)
        for state in SLEEP_STATES:
            # the simulator never sleeps
            self.sleep_state.labels(*self._label_values, state).set(1 if state == "awake" else 0)
        for source in PROMPT_SOURCES:
            self.prompt_by_source.labels(*self._label_values, source)
        for source in CACHED_SOURCES:
            self.prompt_cached_by_source.labels(*self._label_values, source)
        for reason in ADMISSION_REJECTION_REASONS:
            self.admission_rejections.labels(model_name, reason)
        for mode in ("streaming", "non_streaming"):
            for outcome in ("tool_call", "no_tool_call"):
                for request_type in ("chat_completions", "responses", "other"):
                    self.tool_parser.labels(model_name, mode, outcome, request_type)
        self.model_name = model_name

    def child(self, metric: MetricT) -> MetricT:
        # Cached: labels() takes a lock and a dict lookup, on every request, for the same child.
        key = (id(metric), self._label_values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*self._label_values)
        return found

    def bind_gauges(
        self, running: Callable[[], float], waiting: Callable[[], float], kv: Callable[[], float]
    ) -> None:
        self.child(self.running).set_function(running)
        self.child(self.waiting).set_function(waiting)
        # every simulated wait is for a running slot (max_num_seqs); nothing is deferred
        self.waiting_by_reason.labels(*self._label_values, "capacity").set_function(waiting)
        self.child(self.kv_cache).set_function(kv)

    def by_source(self, metric: Counter, source: str) -> Counter:
        key = (id(metric), (*self._label_values, source))
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*self._label_values, source)
        return found

    def parser_invocation(self, streaming: bool, tool_call: bool, times: int = 1) -> None:
        self.tool_parser.labels(
            self.model_name,
            "streaming" if streaming else "non_streaming",
            "tool_call" if tool_call else "no_tool_call",
            "chat_completions",
        ).inc(times)


def observe_repeated(histogram: Histogram, amount: float, times: int) -> None:
    """`times` observations of `amount` for the price of one: a request's per-token steps
    would otherwise cost a locked sum and bucket update each, a tenth of the simulator's
    throughput. Uses prometheus_client's own fields (pinned in uv.lock); a test holds the
    result equal to `times` plain observations."""
    if times <= 0:
        return
    fields: Any = histogram  # the child's storage is not part of the typed API
    fields._raise_if_not_observable()
    fields._sum.inc(amount * times)
    # buckets are stored per bound (the exposition makes them cumulative): the first that fits
    fields._buckets[bisect.bisect_left(fields._upper_bounds, amount)].inc(times)
