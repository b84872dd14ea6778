"""What vllm-router costs and buys, measured side by side in one run (`make bench-router`).

- overhead: the same chat completion straight to a simulator replica and through the router
  in front of it (the compose file's router command), in interleaved rounds, at concurrency 1
  and 8; the added p50/p99 per request.

Every process is the real one on a free port: simulators (`python -m modelsim`), the router
(the pinned vllm-router binary), and for the agent workload the MCP server and the loop.
Percentiles interpolate between closest ranks, as the load tests' do.

    python benchmarks/router.py --rounds 5 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from loadtest.results import percentile  # noqa: E402
from stack.processes import model_simulator, vllm_router  # noqa: E402

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


def _ms(values: list[float], share: float) -> float:
    return percentile(sorted(values), share) * 1000


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


def sections(workdir: Path, args: argparse.Namespace) -> Iterator[list[str]]:
    yield overhead(workdir, args.rounds, args.requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="per round and path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for lines in sections(Path(folder), args):
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
