"""What vllm-router costs and buys, measured side by side in one run (`make bench-router`).

- overhead: the same chat completion straight to a simulator replica and through the router
  in front of it (the compose file's router command), in interleaved rounds, at concurrency 1
  and 8; the added p50/p99 per request.
- affinity: sessions of several turns through the loop and the router to two replicas,
  with the router hashing each session (consistent_hash, the default) and with round_robin:
  the prefix-cache hit rate the replicas report, and TTFT p95 as they produced it.
- capacity: the agent workload (`python -m loadtest`'s agent users, through the real loop and
  MCP server) in rising steps until one misses the SLO, through the router to one simulator
  replica and then to two, with the sessions hashed (consistent_hash) and round robin; each
  replica is a small GPU (CAPACITY_PROFILE: four sequences at a time), so the knee is the
  replicas' and not this machine's two cores. Hashing a score of sessions onto two replicas is
  seldom an exactly even split: round robin shows what perfect balance gives.

Every process is the real one on a free port: simulators (`python -m modelsim`), the router
(the pinned vllm-router binary), and for the agent workload the MCP server and the loop.
Percentiles interpolate between closest ranks, as the load tests' do.

    python benchmarks/router.py --rounds 5 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from common.stats import percentile  # noqa: E402
from harness.router import vllm_router  # noqa: E402
from loadtest.summary import LoadSummary  # noqa: E402
from ops.services import (  # noqa: E402
    free_port,
    mcp_server,
    model_simulator,
    running,
)

CHAT = {
    "model": "leave-copilot",
    "messages": [{"role": "user", "content": "查一下我的假單"}],
    "max_tokens": 16,
}


async def _timed_requests(url: str, requests: int, concurrency: int) -> list[float]:
    """Seconds per request, `concurrency` at a time."""
    latencies: list[float] = []
    queue = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:

        async def worker() -> None:
            for _ in queue:
                started = time.perf_counter()
                answer = await http.post("/v1/chat/completions", json=CHAT)
                latencies.append(time.perf_counter() - started)
                answer.raise_for_status()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def _ms(values: list[float], p: float) -> float:
    return percentile(values, p) * 1000


def overhead(workdir: Path, rounds: int, requests: int) -> list[str]:
    """Direct vs through the router, rounds interleaved so both see the same machine."""
    with ExitStack() as stack:
        replica = stack.enter_context(model_simulator(workdir, profile="instant"))
        router, _ = stack.enter_context(vllm_router(workdir, [replica]))
        lines = ["router overhead (instant simulator, chat completion of 16 tokens):",
                 f"  {'':4} {'direct p50/p99 ms':>20} {'router p50/p99 ms':>20} "
                 f"{'added p50/p99 ms':>18}"]  # fmt: skip
        for concurrency in (1, 8):
            direct: list[float] = []
            routed: list[float] = []
            asyncio.run(_timed_requests(replica, 20, concurrency))  # warm both paths
            asyncio.run(_timed_requests(router, 20, concurrency))
            for _ in range(rounds):
                direct += asyncio.run(_timed_requests(replica, requests, concurrency))
                routed += asyncio.run(_timed_requests(router, requests, concurrency))
            d50, d99, r50, r99 = (
                _ms(direct, 50), _ms(direct, 99), _ms(routed, 50), _ms(routed, 99)
            )  # fmt: skip
            lines.append(
                f"  c{concurrency:<3} {d50:9.2f} / {d99:8.2f} {r50:9.2f} / {r99:8.2f} "
                f"{r50 - d50:+8.2f} / {r99 - d99:+7.2f}   ({len(direct)} requests each)"
            )
    return lines


# A replica that serves four sequences at a time, 25 ms a token: a small GPU whose knee about
# ten agent users reach (an agent run is three model calls of some 20 tokens each). With two
# at a time the knee was 5 users, and one user more or less, and one session hashed unevenly,
# moved the ratio by a third.
CAPACITY_PROFILE = {"max_num_seqs": "4", "itl_ms": "25", "prefill_per_token_ms": "0.05",
                    "prefill_overhead_ms": "10", "slowdown_per_running": "0"}  # fmt: skip


@contextmanager
def agent_stack(
    workdir: Path, replicas: int, profile: dict[str, str], **router_flags: str
) -> Iterator[dict[str, Any]]:
    """The MCP server, `replicas` simulators behind the router, and the loop in front."""
    with ExitStack() as stack:
        mcp = stack.enter_context(mcp_server(workdir))
        engines = [
            stack.enter_context(model_simulator(workdir, gpu_ids=str(k), **profile))
            for k in range(replicas)
        ]
        router, metrics = stack.enter_context(vllm_router(workdir, engines, **router_flags))
        port = free_port()
        loop = f"http://127.0.0.1:{port}"
        env = {"LOOP_PORT": str(port), "LOOP_MODEL_BASE_URL": f"{router}/v1",
               "LOOP_MCP_URL": f"{mcp}/mcp", "LOOP_STORE_URL": f"sqlite:///{workdir}/loop-{port}.db",
               "LOOP_LOG_LEVEL": "warning"}  # fmt: skip
        stack.enter_context(running(["loop"], env, workdir / f"loop-{port}.log", f"{loop}/healthz"))
        yield {"loop": loop, "mcp": f"{mcp}/mcp", "router": router, "metrics": metrics,
               "engines": engines}  # fmt: skip


def _load(stack: dict[str, Any], results: Path, steps: int, step_seconds: float) -> LoadSummary:
    """`python -m loadtest` with agent users, one more each step; its summary.json."""
    command = [
        sys.executable, "-m", "loadtest", "--loop-url", stack["loop"], "--mcp-url", stack["mcp"],
        "--model-url", f"{stack['router']}/v1", "--user-classes", "agent", "--shape", "steps",
        "--users", "1", "--step-users", "1", "--steps", str(steps),
        "--step-seconds", str(step_seconds), "--results-dir", str(results),
        "--prometheus-url", "off",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 1):  # 1: a step missed the SLO, which is what a sweep ends on
        raise RuntimeError(f"python -m loadtest failed:\n{(done.stdout + done.stderr)[-3000:]}")
    (summary,) = sorted(results.glob("*/summary.json"))[-1:]
    return LoadSummary.read(summary)


def capacity(workdir: Path, steps: int, step_seconds: float) -> list[str]:
    """Capacity at the SLO through the router to one replica, then to two: with the sessions
    hashed (the compose default), and spread round robin, which balances perfectly."""
    layouts = ((1, "consistent_hash"), (2, "consistent_hash"), (2, "round_robin"))
    found: dict[tuple[int, str], LoadSummary] = {}
    for replicas, policy in layouts:
        folder = workdir / f"capacity-{replicas}-{policy}"
        folder.mkdir()
        with agent_stack(folder, replicas, CAPACITY_PROFILE, policy=policy) as stack:
            found[replicas, policy] = _load(stack, folder / "results", steps, step_seconds)
    lines = [
        f"capacity at the SLO, agent workload through the router (replicas: {CAPACITY_PROFILE}):"
    ]
    rates = {}
    for (replicas, policy), summary in found.items():
        knee = summary.capacity_at_slo
        broke = next((s for s in summary.steps if not s.slo_met), None)
        rates[replicas, policy] = knee.runs_per_s if knee else 0.0
        users = knee.users if knee else 0
        ended = (
            f"broke at {broke.users} users ({'; '.join(broke.slo_broken)})"
            if broke
            else "no step broke: a lower bound"
        )
        lines.append(
            f"  {replicas} replica(s), {policy:<15} {rates[replicas, policy]:.2f} runs/s at "
            f"{users} users; {ended}"
        )
    one = rates[1, "consistent_hash"]
    for policy in ("consistent_hash", "round_robin"):
        ratio = rates[2, policy] / one if one else float("nan")
        lines.append(f"  two replicas ÷ one, {policy}: {ratio:.2f}×")
    return lines


# Prefill dominates TTFT here, as it does for an agent's long prompts on a GPU: what the cache
# saves shows in TTFT.
AFFINITY_PROFILE = {"prefill_per_token_ms": "0.3", "prefill_overhead_ms": "5", "itl_ms": "5"}
FOLLOW_UPS = (
    "查一下我的假單",
    "我的特休還剩幾天",
    "把我那張家庭旅遊的特休送出審核",
    "查一下我的假單",
)


def _cache_counters(engines: list[str]) -> tuple[float, float]:
    """(prefix-cache hits, queries) in tokens, summed over the replicas."""
    from prometheus_client.parser import text_string_to_metric_families

    hits = queries = 0.0
    for engine in engines:
        for family in text_string_to_metric_families(httpx.get(f"{engine}/metrics").text):
            total = sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
            if family.name == "vllm:prefix_cache_hits":
                hits += total
            elif family.name == "vllm:prefix_cache_queries":
                queries += total
    return hits, queries


def _sessions(loop: str, sessions: int, concurrency: int) -> None:
    """`sessions` conversations of len(FOLLOW_UPS) streamed runs each, `concurrency` at once."""
    headers = {"Authorization": "Bearer demo-token-employee"}

    async def one(number: int, http: httpx.AsyncClient) -> None:
        for text in FOLLOW_UPS:
            body = {"input": text, "session_id": f"ses-bench-{number}", "stream": True,
                    "confirm": "accept"}  # fmt: skip
            async with http.stream("POST", "/v1/runs", json=body) as answer:
                async for _ in answer.aiter_lines():
                    pass

    async def all_of_them() -> None:
        limit = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=loop, headers=headers, timeout=120) as http:

            async def limited(number: int) -> None:
                async with limit:
                    await one(number, http)

            await asyncio.gather(*(limited(n) for n in range(sessions)))

    asyncio.run(all_of_them())


def affinity(workdir: Path, sessions: int) -> list[str]:
    lines = [f"session affinity, {sessions} sessions of {len(FOLLOW_UPS)} runs, 2 replicas "
             f"({AFFINITY_PROFILE}):"]  # fmt: skip
    for policy in ("consistent_hash", "round_robin"):
        folder = workdir / f"affinity-{policy}"
        folder.mkdir()
        profile = {**AFFINITY_PROFILE, "timing_log": str(folder / "timing.jsonl")}
        with agent_stack(folder, 2, profile, policy=policy) as stack:
            before = _cache_counters(stack["engines"])
            started = time.perf_counter()
            _sessions(stack["loop"], sessions, concurrency=4)
            seconds = time.perf_counter() - started
            after = _cache_counters(stack["engines"])
        ttfts = [
            json.loads(line)["ttft_s"]
            for line in (folder / "timing.jsonl").read_text().splitlines()
            if line.strip()
        ]
        hits, queries = after[0] - before[0], after[1] - before[1]
        lines.append(
            f"  {policy:<16} prefix-cache hit rate {hits / queries if queries else 0:6.1%}  "
            f"TTFT p50 {_ms(ttfts, 50):6.1f} ms  p95 {_ms(ttfts, 95):6.1f} ms  "
            f"({len(ttfts)} model calls, "
            f"{seconds:.0f} s)"
        )
    return lines


def sections(workdir: Path, args: argparse.Namespace) -> Iterator[list[str]]:
    yield overhead(workdir, args.rounds, args.requests)
    yield affinity(workdir, args.sessions)
    yield capacity(workdir, args.steps, args.step_seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="per round and path")
    parser.add_argument("--sessions", type=int, default=24, help="affinity: sessions per policy")
    parser.add_argument("--steps", type=int, default=24, help="capacity: steps of 1 more user")
    parser.add_argument("--step-seconds", type=float, default=8.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for lines in sections(Path(folder), args):
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
