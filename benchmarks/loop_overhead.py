"""The loop against the seed script's way, side by side in one process run.

Both drive the seed scenario (「把我那張<reason>的特休送出審核」: search, update with the real id,
answer) against the real MCP server and the simulator's `instant` profile:
- baseline: what the seed script does — a new MCP connection, initialize and list_tools for
  every run, then the bare loop;
- loop: this project's AgentLoop with the long-lived per-user MCP connection.
Prints runs/s for each (sequential and concurrent), their ratio, and the loop's own overhead
per tool call beyond the MCP round trip (p50/p99).

    python benchmarks/loop_overhead.py --runs 150 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.seed_loop import seed_loop  # noqa: E402
from common.stats import percentile  # noqa: E402
from loop.engine import AgentLoop, ToolInfo, ToolResult  # noqa: E402
from loop.mcp_pool import McpPool  # noqa: E402
from loop.model import OpenAIChatModel  # noqa: E402
from mcp_server.storage import Balance, Database, Leave  # noqa: E402
from ops.services import mcp_server, model_simulator  # noqa: E402

TOKEN = "demo-token-employee"


def make_drafts(db_url: str, count: int) -> list[str]:
    """Fresh drafts with unique reasons, so every run submits a real draft."""
    database = Database(db_url)
    reasons = []
    with database.write() as s:
        start = dt.date(2040, 1, 2)
        for n in range(count):
            day = start + dt.timedelta(days=n)
            reason = f"基準測試{n:05d}號"
            s.add(
                Leave(
                    id=f"LV-b{n:05x}",
                    employee_id="E001",
                    leave_type="特休",
                    start_date=day,
                    end_date=day,
                    days=1.0,
                    status="draft",
                    reason=reason,
                )
            )
            reasons.append(reason)
        balance = s.get(Balance, ("E001", "特休"))
        if balance is None:
            raise RuntimeError("the seed data has no 特休 balance for E001")
        balance.remaining_days += count
    database.dispose()
    return reasons


class TimedTools:
    """The loop's MCP adapter, timing the raw MCP round trip of each call."""

    def __init__(self, pool: McpPool) -> None:
        self.pool = pool
        self.raw_ms: list[float] = []

    async def list(self) -> list[ToolInfo]:
        connection = await self.pool.connection(TOKEN)
        return await connection.tools()

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        connection = await self.pool.connection(TOKEN)
        started = time.perf_counter()
        result = await connection.call(name, arguments)
        self.raw_ms.append((time.perf_counter() - started) * 1000)
        return result


async def run_concurrently(
    runs: list[Any],
    concurrency: int,
    one_run: Callable[[Any], Awaitable[object]],
) -> tuple[float, list[float]]:
    """`one_run(run)` for every run, `concurrency` at a time: runs/s and each one's seconds."""
    queue = list(runs)
    latencies: list[float] = []

    async def worker() -> None:
        while queue:
            request = queue.pop()
            started = time.perf_counter()
            await one_run(request)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rate = len(runs) / (time.perf_counter() - started)
    return rate, latencies


async def main_async(
    args: argparse.Namespace, mcp_url: str, model_url: str, reasons: list[str]
) -> None:
    requests = [f"把我那張{r}的特休送出審核" for r in reasons]
    model_client = openai.AsyncOpenAI(base_url=model_url, api_key="unused", max_retries=0)
    pool = McpPool(mcp_url)
    tools = TimedTools(pool)
    loop = AgentLoop(OpenAIChatModel(base_url=model_url, model="leave-copilot", api_key="unused"))
    overhead_ms: list[float] = []

    async def loop_run(request: str) -> None:
        before = len(tools.raw_ms)
        result = await loop.run(request, tools)
        assert result.status == "completed" and "送出審核" in result.answer, result.answer
        raw = tools.raw_ms[before:]
        steps = [s.duration_ms for s in result.steps if s.type == "tool"]
        # only exact when tool calls of concurrent runs do not interleave: measured sequentially
        if len(raw) == len(steps):
            overhead_ms.extend(step - r for step, r in zip(steps, raw, strict=True))

    async def base_run(request: str) -> None:
        run = await seed_loop(mcp_url, TOKEN, model_client, request)
        assert run.turns == 3 and "送出審核" in run.answer, run.answer

    # warm both paths (imports, connections, server caches) before measuring
    await loop_run(requests.pop())
    await base_run(requests.pop())
    per_variant = args.runs
    plan = [("sequential", 1), (f"concurrency {args.concurrency}", args.concurrency)]
    print(f"seed scenario, {per_variant} runs per variant and load; instant simulator")
    for label, concurrency in plan:
        base_requests = [requests.pop() for _ in range(per_variant)]
        loop_requests = [requests.pop() for _ in range(per_variant)]
        if label == "sequential":
            overhead_ms.clear()
        base_rate, base_lat = await run_concurrently(base_requests, concurrency, base_run)
        loop_rate, loop_lat = await run_concurrently(loop_requests, concurrency, loop_run)
        base_p50 = statistics.median(base_lat) * 1000
        loop_p50 = statistics.median(loop_lat) * 1000
        print(
            f"{label:16s} baseline {base_rate:6.1f} runs/s (p50 {base_p50:6.1f} ms)"
            f"   loop {loop_rate:6.1f} runs/s (p50 {loop_p50:6.1f} ms)"
            f"   ratio {loop_rate / base_rate:4.2f}x"
        )
        if label == "sequential":
            ordered = sorted(overhead_ms)
            p99 = percentile(ordered, 99)
            mcp_p50 = statistics.median(tools.raw_ms)
            print(
                f"loop overhead per tool call beyond the MCP round trip: "
                f"p50 {statistics.median(ordered):.3f} ms, p99 {p99:.3f} ms "
                f"({len(ordered)} calls; MCP round trip p50 {mcp_p50:.2f} ms)"
            )
    print(f"MCP connections opened by the loop: {pool.connects}")
    await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150, help="runs per variant and load")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with (
            mcp_server(workdir, MCP_LOG_LEVEL="WARNING") as mcp,
            model_simulator(workdir, profile="instant", log_level="warning") as sim,
        ):
            db_url = f"sqlite:///{next(workdir.glob('leave-*.db'))}"
            reasons = make_drafts(db_url, args.runs * 4 + 2)
            asyncio.run(main_async(args, f"{mcp}/mcp", f"{sim}/v1", reasons))


if __name__ == "__main__":
    main()
