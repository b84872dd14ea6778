"""The latency model as a streaming client sees it, and queueing under load."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .conftest import SEED_REQUEST

TEXT_BODY = {
    "model": "leave-copilot",
    "messages": [{"role": "user", "content": "今天天氣如何？"}],  # a ~45-token text answer
    "stream": True,
}


async def measure_stream(
    http: httpx.AsyncClient, url: str, body: dict
) -> tuple[float, list[float]]:
    """(TTFT, inter-token gaps) in seconds, from the client's side of the socket."""
    started = time.perf_counter()
    stamps: list[float] = []
    async with http.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"role"' not in line:
                stamps.append(time.perf_counter())
    return stamps[0] - started, [b - a for a, b in itertools.pairwise(stamps)]


def within(measured: float, expected: float) -> bool:
    return abs(measured - expected) <= max(0.05 * expected, 0.002)


async def test_streaming_client_measures_the_configured_ttft_and_itl(start_simulator):
    with start_simulator(
        prefill_overhead_ms="80", prefill_per_token_ms="0", itl_ms="20", slowdown_per_running="0"
    ) as base:
        url = f"{base}/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30) as http:
            await measure_stream(http, url, TEXT_BODY)  # warm the connection and the server
            before = ttft_sum_and_count((await http.get(f"{base}/metrics")).text)
            runs = [await measure_stream(http, url, TEXT_BODY) for _ in range(5)]
            after = ttft_sum_and_count((await http.get(f"{base}/metrics")).text)
    ttft = statistics.median(r[0] for r in runs)
    itl = statistics.median(g for r in runs for g in r[1])
    assert within(ttft, 0.080), f"TTFT {ttft * 1000:.1f} ms"
    assert within(itl, 0.020), f"ITL {itl * 1000:.1f} ms"
    # the server's own histogram agrees with what it injected
    mean = (after[0] - before[0]) / (after[1] - before[1])
    assert within(mean, 0.080), f"server-side TTFT {mean * 1000:.1f} ms"


def ttft_sum_and_count(metrics: str) -> tuple[float, float]:
    family = next(
        f
        for f in text_string_to_metric_families(metrics)
        if f.name == "vllm:time_to_first_token_seconds"
    )
    values = {s.name: s.value for s in family.samples}
    return (
        values["vllm:time_to_first_token_seconds_sum"],
        values["vllm:time_to_first_token_seconds_count"],
    )


async def test_prefill_grows_with_prompt_tokens(start_simulator):
    with start_simulator(
        prefill_overhead_ms="10", prefill_per_token_ms="2", itl_ms="1", slowdown_per_running="0"
    ) as base:
        url = f"{base}/v1/chat/completions"
        long_prompt = {
            **TEXT_BODY,
            "messages": [{"role": "user", "content": "今天天氣如何？" * 20}],
        }
        async with httpx.AsyncClient(timeout=30) as http:
            short_ttft, _ = await measure_stream(http, url, TEXT_BODY)
            long_ttft, _ = await measure_stream(http, url, long_prompt)
    # 19 extra copies × 7 tokens × 2 ms ≈ 266 ms more
    assert 0.2 < long_ttft - short_ttft < 0.35


async def test_beyond_max_num_seqs_requests_wait_and_queue_time_is_recorded(start_simulator):
    with start_simulator(
        max_num_seqs="2", prefill_overhead_ms="5", itl_ms="25", slowdown_per_running="0"
    ) as base:
        url = f"{base}/v1/chat/completions"
        body = {
            "model": "leave-copilot",
            "messages": [{"role": "user", "content": SEED_REQUEST}],
            "tools": [],
        }
        seen_waiting: list[float] = []
        async with httpx.AsyncClient(timeout=60) as http:
            sample_every = 0.02  # seconds between scrapes while the load runs

            async def watch() -> None:
                while True:
                    text = (await http.get(f"{base}/metrics")).text
                    for family in text_string_to_metric_families(text):
                        if family.name == "vllm:num_requests_waiting":
                            seen_waiting.append(family.samples[0].value)
                    await asyncio.sleep(sample_every)

            watcher = asyncio.create_task(watch())
            started = time.perf_counter()
            await asyncio.gather(*(http.post(url, json=body) for _ in range(6)))
            elapsed = time.perf_counter() - started
            watcher.cancel()
            metrics = (await http.get(f"{base}/metrics")).text
    assert max(seen_waiting) >= 3  # 6 requests, 2 slots
    queue = next(
        f
        for f in text_string_to_metric_families(metrics)
        if f.name == "vllm:request_queue_time_seconds"
    )
    sums = {s.name: s.value for s in queue.samples if not s.labels.get("le")}
    # waves of 2: the 2nd pair waits one service time, the 3rd two → queue time is real
    assert sums["vllm:request_queue_time_seconds_sum"] > 0.5
    single = elapsed / 3
    assert single > 0.3  # each wave takes ~45 tokens × 25 ms
