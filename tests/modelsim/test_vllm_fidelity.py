"""Shapes and metrics compared with what a real vLLM 0.32 server sent (tests/fixtures/vllm-0.32)."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common import sse
from modelsim.metrics import prompt_sources

from .exposition import FAMILIES, sample_value, shape
from .helpers import LEAVE_TOOLS, SEED_REQUEST, SYSTEM

CAPTURED = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-0.32"
BODY = {
    "model": "leave-copilot",
    "messages": [{"role": "user", "content": SEED_REQUEST}],
    "tools": LEAVE_TOOLS,
}
DEPRECATED = [
    "vllm:gpu_cache_usage_perc",
    "vllm:time_per_output_token_seconds",
    "vllm:gpu_prefix_cache",
    "vllm:num_requests_swapped",
    "vllm:cpu_cache_usage_perc",
]


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


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


def vllm_families(text: str) -> dict[str, object]:
    """The `vllm:` families of a page, without the `_created` gauges the parser splits off."""
    return {
        name: family
        for name, family in families(text).items()
        if name.startswith("vllm:") and not name.endswith("_created")
    }


def test_every_real_vllm_family_is_exported_alike(exercised_metrics):
    """Diff against the whole captured page, not only the families a dashboard uses."""
    real = vllm_families((CAPTURED / "metrics-idle.txt").read_text())
    ours = vllm_families(exercised_metrics)
    absent = sorted(set(real) - set(ours))
    print(f"\nvLLM 0.32 families the simulator does not export: {absent or 'none'}")
    differing = [
        f"{name}: ours {shape(ours[name])}, real {shape(real[name])}"
        for name in sorted(set(real) & set(ours))
        if shape(ours[name]) != shape(real[name])
    ]
    invented = sorted(set(ours) - set(real))
    assert not absent, f"missing families: {absent}"
    assert not differing, "families that differ:\n" + "\n".join(differing)
    assert not invented, f"families vLLM 0.32 does not have: {invented}"


def test_promtool_finds_nothing_in_our_vllm_families_it_does_not_find_in_vllms(exercised_metrics):
    """The live test ignores promtool's lines about `vllm:` names (the colon is vLLM's own);
    here they must be exactly the real server's, e.g. the `_total` on a histogram's name."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool: apt-get install prometheus")

    def problems(page: str) -> set[str]:
        done = subprocess.run(
            [promtool, "check", "metrics"], input=page, capture_output=True, text=True
        )
        return {line for line in (done.stdout + done.stderr).splitlines() if "vllm:" in line}

    real = problems((CAPTURED / "metrics-idle.txt").read_text())
    assert problems(exercised_metrics) - real == set()


def label_sets(family) -> set[tuple[tuple[str, str], ...]]:
    return {
        tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        for sample in family.samples
    }


def test_enumerable_label_values_are_vllms(exercised_metrics):
    """Every series vLLM creates up front (sources, reasons, sleep states…) exists here too."""
    real = vllm_families((CAPTURED / "metrics-idle.txt").read_text())
    ours = vllm_families(exercised_metrics)
    for name in set(real) - {"vllm:cache_config_info"}:  # its values are the server's settings
        assert label_sets(ours[name]) == label_sets(real[name]), name


def test_cache_config_info_reports_the_simulators_kv_capacity(exercised_metrics):
    (info,) = families(exercised_metrics)["vllm:cache_config_info"].samples
    labels = info.labels
    assert info.value == 1
    assert labels["engine"] == "0" and labels["enable_prefix_caching"] == "True"
    assert labels["kv_cache_size_tokens"] == "850000"  # the instant profile's KV capacity
    assert int(labels["num_gpu_blocks"]) * int(labels["block_size"]) == 850_000
    assert float(labels["kv_cache_max_concurrency"]) == pytest.approx(850_000 / 4096)


def test_families_without_a_model_stay_constant(exercised_metrics):
    for name in (
        "vllm:external_prefix_cache_queries_total",
        "vllm:external_prefix_cache_hits_total",
        "vllm:mm_cache_queries_total",
        "vllm:mm_cache_hits_total",
        "vllm:estimated_flops_per_gpu_total",
        "vllm:estimated_read_bytes_per_gpu_total",
        "vllm:estimated_write_bytes_per_gpu_total",
        "vllm:admission_rejections_total",
        "vllm:num_preemptions_total",
        "vllm:request_num_preemptions_sum",
    ):
        assert sample_value(exercised_metrics, name) == 0, name
    assert sample_value(exercised_metrics, "vllm:engine_sleep_state", sleep_state="awake") == 1
    assert sample_value(exercised_metrics, "vllm:engine_sleep_state") == 1
    assert (
        sample_value(exercised_metrics, "vllm:num_requests_waiting_by_reason", reason="deferred")
        == 0
    )
    by_source = "vllm:prompt_tokens_by_source_total"
    assert sample_value(exercised_metrics, by_source, source="external_kv_transfer") == 0
    cached_by_source = "vllm:prompt_tokens_cached_by_source_total"
    for source in ("host", "p2p", "disk", "external_unspecified"):
        assert sample_value(exercised_metrics, cached_by_source, source=source) == 0, source


def test_a_repeated_prompt_is_counted_as_cached_prompt_tokens(sim_url):
    # a system prompt no earlier test sent, so the first request misses the prefix cache
    system = f"{SYSTEM}（{uuid.uuid4().hex}）"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": SEED_REQUEST}]
    body = {"model": "leave-copilot", "messages": messages, "tools": LEAVE_TOOLS}

    def delta(before: str, after: str, name: str, **labels: str) -> float:
        return sample_value(after, name, **labels) - sample_value(before, name, **labels)

    with httpx.Client(base_url=sim_url) as http:
        pages = [http.get("/metrics").text]
        usages = []
        for _ in range(2):
            answer = http.post("/v1/chat/completions", json=body)
            usages.append(answer.raise_for_status().json()["usage"])
            pages.append(http.get("/metrics").text)
    first, second = (
        {
            "prompt": delta(a, b, "vllm:prompt_tokens_total"),
            "hits": delta(a, b, "vllm:prefix_cache_hits_total"),
            "cached": delta(a, b, "vllm:prompt_tokens_cached_total"),
            "device": delta(a, b, "vllm:prompt_tokens_cached_by_source_total", source="device"),
            "compute": delta(a, b, "vllm:prompt_tokens_by_source_total", source="local_compute"),
            "cache_hit": delta(
                a, b, "vllm:prompt_tokens_by_source_total", source="local_cache_hit"
            ),
            "kv_computed": delta(a, b, "vllm:request_prefill_kv_computed_tokens_sum"),
        }
        for a, b in itertools.pairwise(pages)
    )
    prompt = usages[0]["prompt_tokens"]
    assert usages[1]["prompt_tokens"] == prompt
    # every whole 16-token block of the prompt but its last token, which is always computed
    prefix = (prompt - 1) // 16 * 16
    assert 0 < prefix < prompt
    assert first == {
        "prompt": prompt, "hits": 0, "cached": 0, "device": 0, "compute": prompt,
        "cache_hit": 0, "kv_computed": prompt,
    }  # fmt: skip
    assert second == {
        "prompt": prompt, "hits": prefix, "cached": prefix, "device": prefix,
        "compute": prompt - prefix, "cache_hit": prefix, "kv_computed": prompt - prefix,
    }  # fmt: skip


def test_per_request_histograms_count_what_was_served(sim_url):
    # a question no earlier test asked: only the tools' blocks, which every test sends, hit
    question = f"今天天氣如何？{uuid.uuid4().hex}"
    body = {**BODY, "messages": [{"role": "user", "content": question}], "max_tokens": 500}
    with httpx.Client(base_url=sim_url) as http:
        before = http.get("/metrics").text
        usage = http.post("/v1/chat/completions", json=body).raise_for_status().json()["usage"]
        after = http.get("/metrics").text

    def delta(name: str) -> float:
        return sample_value(after, name) - sample_value(before, name)

    prompt, generated = usage["prompt_tokens"], usage["completion_tokens"]
    cached = delta("vllm:prefix_cache_hits_total")
    assert generated > 1 and cached > 0
    # one step for the prefill (the tokens not cached, and the first token), then one per
    # generated token: vLLM observes computed prompt tokens + generated tokens per step
    assert delta("vllm:iteration_tokens_total_count") == generated
    assert delta("vllm:iteration_tokens_total_sum") == prompt - cached + generated
    assert (
        sample_value(after, "vllm:iteration_tokens_total_bucket", le="1.0")
        - sample_value(before, "vllm:iteration_tokens_total_bucket", le="1.0")
        == generated - 1
    )
    # the most tokens any sequence generated, not max_tokens (vLLM observes the former)
    assert delta("vllm:request_max_num_generation_tokens_sum") == generated
    assert delta("vllm:request_params_max_tokens_sum") == 500
    assert delta("vllm:request_params_n_sum") == delta("vllm:request_params_n_count") == 1
    assert delta("vllm:request_num_preemptions_count") == 1
    assert delta("vllm:request_num_preemptions_sum") == 0


@pytest.mark.parametrize(
    ("prompt", "hits", "cached", "local_compute", "local_cache_hit"),
    [
        (100, 0, 0, 100, 0),
        (100, 64, 64, 36, 64),
        (97, 96, 96, 1, 96),  # all but the last token, which is always computed
        (100, 100, 99, 1, 99),
    ],
)
def test_prompt_sources_split_as_vllm_counts(prompt, hits, cached, local_compute, local_cache_hit):
    sources = prompt_sources(prompt, hits)
    assert (sources.cached, sources.local_compute, sources.local_cache_hit) == (
        cached,
        local_compute,
        local_cache_hit,
    )
    # vLLM 0.32's PromptTokenStats: computed + local_cache_hit = the prompt
    assert sources.local_compute + sources.local_cache_hit == prompt


async def test_requests_beyond_max_num_seqs_wait_for_capacity(start_simulator):
    with start_simulator(
        max_num_seqs="1",
        prefill_overhead_ms="0",
        prefill_per_token_ms="0",
        itl_ms="20",  # ~45 tokens: each request holds the one slot for ~0.9 s
        slowdown_per_running="0",
    ) as base:
        body = {
            "model": "leave-copilot",
            "messages": [{"role": "user", "content": "今天天氣如何？"}],
        }
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:

            async def waiting() -> tuple[float, float, float]:
                page = (await http.get("/metrics")).text
                return (
                    sample_value(page, "vllm:num_requests_waiting"),
                    sample_value(page, "vllm:num_requests_waiting_by_reason", reason="capacity"),
                    sample_value(page, "vllm:num_requests_waiting_by_reason", reason="deferred"),
                )

            async def three_requests() -> list[httpx.Response]:
                posts = (http.post("/v1/chat/completions", json=body) for _ in range(3))
                return await asyncio.gather(*posts)

            load = asyncio.create_task(three_requests())
            seen = []
            while not load.done() and not any(capacity >= 2 for _, capacity, _ in seen):
                seen.append(await waiting())  # each scrape yields to the requests it watches
            assert all(r.status_code == 200 for r in await load)
            idle = await waiting()
    assert max(capacity for _, capacity, _ in seen) == 2  # one slot: the other two wait
    assert all(total == capacity and deferred == 0 for total, capacity, deferred in seen)
    assert idle == (0, 0, 0)


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
        event.data if event.data == sse.DONE else event.json()
        for event in sse.events(text.splitlines())
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


@pytest.mark.parametrize("amount", [1, 7, 16384, 20000])
def test_repeated_observations_expose_as_many_plain_ones(amount):
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from modelsim.metrics import observe_repeated

    pages = []
    for bulk in (False, True):
        registry = CollectorRegistry()
        histogram = Histogram("h", "h", buckets=(1, 8, 16, 16384), registry=registry)
        histogram.observe(3)
        if bulk:
            observe_repeated(histogram, amount, 5)
        else:
            for _ in range(5):
                histogram.observe(amount)
        pages.append(
            [
                line
                for line in generate_latest(registry).decode().splitlines()
                if "_created" not in line
            ]
        )
    assert pages[0] == pages[1]
