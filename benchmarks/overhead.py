"""What the loop and the MCP server cost per run and per call, next to their floors.

One run prints, side by side, on the same simulator (`instant` profile) and MCP server, all
started here as real child processes:

- the loop, three ways, on two tasks (read: search then answer, 2 turns; seed: search, submit
  the draft, answer, 3 turns) at concurrency 1 and 8:
  - engine: `AgentLoop` in this process, with the long-lived MCP connection;
  - service: `POST /v1/runs` on `python -m loop` (non-streaming, the run recorded in its store);
  - seed script: the seed article's way, a new MCP connection per run (benchmarks/seed_loop.py);
- our MCP server (auth, database, metrics; on its own freshly seeded database, not the loop's,
  which fills up with the seed task's drafts) next to a minimal MCP SDK server returning the
  same `search_leaves` payload (benchmarks/minimal_mcp_server.py), 8 clients calling at once.

Figures: runs (calls)/s, latency p50/p99, and CPU ms per run (call) of the process under test:
this process for the engine and the seed script (whose driver is a few awaits per run), the
service's or server's own process (/proc/<pid>/stat) otherwise. Cells are measured in rounds
(each round measures every cell once), and within a round the ways a cell compares take turns
in slices (`--slices`), so a noisy neighbour's slow spell hits all of them alike; each figure
is the median over the rounds with its range, and the ratios are medians of the per-round
ratios, with their range too.

With two CPUs or more the process under test gets one of its own and everything else (the
load generator, the simulator, the MCP server it calls) shares the rest, for every cell alike
(`--no-pin`: leave placement to the scheduler). Otherwise the engine cells, whose process is
the load generator too, and the service cells, where the load generator is a process more
competing for the same CPUs, would not measure the same thing.

    python benchmarks/overhead.py --rounds 5 --runs 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.loop_overhead import make_drafts, run_concurrently  # noqa: E402
from benchmarks.seed_loop import seed_loop  # noqa: E402
from common.runs_protocol import RunStatus  # noqa: E402
from common.stats import percentile  # noqa: E402
from loop.engine import AgentLoop, ToolInfo, ToolResult  # noqa: E402
from loop.mcp_pool import McpPool  # noqa: E402
from loop.model import OpenAIChatModel  # noqa: E402
from ops.services import (  # noqa: E402
    ServiceProcess,
    free_port,
    model_simulator,
    running,
    seed_database,
)

TOKEN = "demo-token-employee"
READ_REQUEST = "查一下我那張家庭旅遊的假"
SEARCH_ARGUMENTS = {"keyword": "家庭旅遊"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MCP_CLIENTS = 8
WARM_RUNS = 2  # per task and way, before the first round
SLICES = 4


@dataclass(frozen=True)
class Placement:
    """Where the process under test runs, and where everything else does (None: anywhere)."""

    under_test: set[int] | None = None
    helpers: set[int] | None = None

    @staticmethod
    def split() -> Placement:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return Placement()
        return Placement(under_test={cpus[-1]}, helpers=set(cpus[:-1]))

    def put(self, pid: int, under_test: bool) -> None:
        """Every thread of `pid` onto its CPUs (threads started later inherit their
        starter's)."""
        cpus = self.under_test if under_test else self.helpers
        if cpus is None:
            return
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cpus)

    def describe(self) -> str:
        if self.under_test is None or self.helpers is None:
            return "placement left to the scheduler"
        return (
            f"the process under test on CPU {','.join(map(str, sorted(self.under_test)))}; "
            "the load generator, simulator and MCP server on CPU "
            f"{','.join(map(str, sorted(self.helpers)))}"
        )


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


@dataclass
class Measured:
    rate: float  # runs or calls per second
    p50_ms: float
    p99_ms: float
    cpu_ms: float  # per run or call, of the process under test


@dataclass
class Sample:
    """One slice of a cell: how many runs (calls), how long they took, each one's seconds, and
    the CPU seconds the process under test spent meanwhile."""

    count: int
    seconds: float
    latencies: list[float]
    cpu_seconds: float

    def __add__(self, other: Sample) -> Sample:
        return Sample(
            self.count + other.count,
            self.seconds + other.seconds,
            self.latencies + other.latencies,
            self.cpu_seconds + other.cpu_seconds,
        )

    def measured(self) -> Measured:
        latencies = sorted(self.latencies)
        return Measured(
            rate=self.count / self.seconds,
            p50_ms=statistics.median(latencies) * 1000,
            p99_ms=percentile(latencies, 99) * 1000,
            cpu_ms=self.cpu_seconds * 1000 / self.count,
        )


async def sample(
    requests: list[Any],
    concurrency: int,
    one: Callable[[Any], Awaitable[None]],
    cpu: Callable[[], float],
) -> Sample:
    """`one(request)` for every request, `concurrency` at a time, with `cpu()` around it."""
    cpu_before = cpu()
    rate, latencies = await run_concurrently(requests, concurrency, one)
    cpu_used = cpu() - cpu_before
    return Sample(len(requests), len(requests) / rate, latencies, cpu_used)


def slice_sizes(total: int, slices: int) -> list[int]:
    """`total` split into `slices` nearly equal parts (none empty)."""
    slices = max(1, min(slices, total))
    return [total // slices + (1 if i < total % slices else 0) for i in range(slices)]


# -- the loop, three ways ------------------------------------------------------------------


class PoolTools:
    """The engine's tools: the user's long-lived connection from the loop's pool."""

    def __init__(self, pool: McpPool) -> None:
        self.pool = pool

    async def list(self) -> list[ToolInfo]:
        return await (await self.pool.connection(TOKEN)).tools()

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return await (await self.pool.connection(TOKEN)).call(name, arguments)


def submit_request(reason: str) -> str:
    return f"把我那張{reason}的特休送出審核"


class LoopWays:
    """One run of a task, each way; each checks that the run did what the task asks."""

    def __init__(self, mcp_url: str, model_url: str, service_url: str, service_pid: int) -> None:
        self.mcp_url = mcp_url
        self.service_url = service_url
        self.service_pid = service_pid
        self.pool = McpPool(mcp_url)
        self.tools = PoolTools(self.pool)
        self.model = OpenAIChatModel(base_url=model_url, model="leave-copilot", api_key="unused")
        self.engine = AgentLoop(self.model)
        self.seed_client = openai.AsyncOpenAI(base_url=model_url, api_key="u", max_retries=0)
        self.http = httpx2.AsyncClient(
            base_url=service_url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
            limits=httpx2.Limits(max_connections=64, max_keepalive_connections=64),
        )

    async def engine_run(self, request: str) -> None:
        result = await self.engine.run(request, self.tools)
        expect(result.status == RunStatus.COMPLETED, result.answer)

    async def service_run(self, request: str) -> None:
        response = await self.http.post("/v1/runs", json={"input": request})
        body = response.json()
        expect(response.status_code == 200 and body["status"] == "completed", response.text)

    async def seed_script_run(self, request: str) -> None:
        run = await seed_loop(self.mcp_url, TOKEN, self.seed_client, request)
        expect(len(run.steps) >= 1 and not run.steps[-1][2].startswith("["), run.answer)

    async def http_round_trip(self, _request: object) -> None:
        (await self.http.get("/healthz")).raise_for_status()

    async def close(self) -> None:
        await self.pool.close()
        await self.model.close()
        await self.seed_client.close()
        await self.http.aclose()


def expect(condition: bool, detail: str) -> None:
    if not condition:
        raise RuntimeError(f"a benchmark run did not do its task: {detail[:300]}")


# -- the MCP servers -----------------------------------------------------------------------


class McpCallers:
    """MCP_CLIENTS clients of one server (modern era, as the loop calls), kept open from one
    slice to the next, each warmed before the first."""

    def __init__(self, url: str, pid: int) -> None:
        self.url = url
        self.pid = pid
        self._free = asyncio.Queue[Client]()

    async def open(self, stack: AsyncExitStack) -> McpCallers:
        for _ in range(MCP_CLIENTS):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
            )
            client = Client(streamable_http_client(self.url, http_client=http))
            self._free.put_nowait(await stack.enter_async_context(client))
        for _ in range(MCP_CLIENTS):
            await self._one(None)
        return self

    async def _one(self, _request: object) -> None:
        client = await self._free.get()
        try:
            result = await client.call_tool("search_leaves", SEARCH_ARGUMENTS)
            expect(not result.is_error, str(result.content))
        finally:
            self._free.put_nowait(client)

    async def calls(self, count: int) -> Sample:
        """`count` search_leaves calls, MCP_CLIENTS at a time."""
        return await sample(
            [None] * count, MCP_CLIENTS, self._one, lambda: process_cpu_seconds(self.pid)
        )


async def search_payload(url: str) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("search_leaves", SEARCH_ARGUMENTS)
        if result.structured_content is None:
            raise RuntimeError("search_leaves returned no structured content")
        return dict(result.structured_content)


@contextmanager
def leave_mcp_server(workdir: Path, name: str) -> Iterator[tuple[str, str, ServiceProcess]]:
    """Our MCP server on a freshly seeded database: its base URL, database URL and process."""
    port = free_port()
    db_url = f"sqlite:///{workdir / f'{name}.db'}"
    seed_database(db_url)
    env = {"MCP_DATABASE_URL": db_url, "MCP_PORT": str(port), "MCP_LOG_LEVEL": "WARNING"}
    base = f"http://127.0.0.1:{port}"
    with running(["mcp_server"], env, workdir / f"{name}.log", f"{base}/readyz") as server:
        yield base, db_url, server


@contextmanager
def minimal_server(workdir: Path, payload: dict[str, Any]) -> Iterator[tuple[str, int]]:
    port = free_port()
    payload_file = workdir / "minimal-payload.json"
    payload_file.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    argv = [
        sys.executable,
        str(REPO_ROOT / "benchmarks" / "minimal_mcp_server.py"),
        f"--port={port}",
        f"--payload={payload_file}",
    ]
    base = f"http://127.0.0.1:{port}"
    with running([], {}, workdir / "minimal.log", f"{base}/healthz", argv=argv) as server:
        yield f"{base}/mcp", server.process.pid


# -- the rounds ----------------------------------------------------------------------------


Key = tuple[str, ...]  # what a cell measures, e.g. ("loop", "seed", "8", "service")


def rotated(items: list[Any], by: int) -> list[Any]:
    shift = by % len(items)
    return items[shift:] + items[:shift]


async def run_rounds(
    args: argparse.Namespace,
    ways: LoopWays,
    reasons: list[str],
    servers: list[tuple[str, McpCallers]],
    placement: Placement,
) -> dict[Key, list[Measured]]:
    def requests_for(task: str, count: int = args.runs) -> list[str]:
        if task == "read":
            return [READ_REQUEST] * count
        return [submit_request(reasons.pop()) for _ in range(count)]

    loop_ways: list[tuple[str, Callable[[Any], Awaitable[None]], Callable[[], float]]] = [
        ("engine", ways.engine_run, time.process_time),
        ("service", ways.service_run, lambda: process_cpu_seconds(ways.service_pid)),
        ("seed script", ways.seed_script_run, time.process_time),
    ]
    # warm every path (imports, connections, server caches) before measuring
    for task in ("read", "seed"):
        for _, one, _cpu in loop_ways:
            for request in requests_for(task, WARM_RUNS):
                await one(request)
    results: dict[Key, list[Measured]] = {}

    async def taking_turns(
        ways: list[tuple[str, Callable[[int], Awaitable[Sample]]]], total: int, round_no: int
    ) -> dict[str, Measured]:
        """Each way's `total` runs in slices, the ways taking turns slice by slice (the order
        rotated each time): a slow spell of a noisy machine falls on all of them alike."""
        sums: dict[str, Sample] = {}
        for slice_no, size in enumerate(slice_sizes(total, args.slices)):
            for name, run_slice in rotated(ways, round_no + slice_no):
                part = await run_slice(size)
                sums[name] = sums[name] + part if name in sums else part
        return {name: total_sample.measured() for name, total_sample in sums.items()}

    def loop_way(
        name: str,
        one: Callable[[Any], Awaitable[None]],
        cpu: Callable[[], float],
        task: str,
        concurrency: int,
    ) -> tuple[str, Callable[[int], Awaitable[Sample]]]:
        async def run_slice(size: int) -> Sample:
            # this process is the one under test for the engine and the seed script
            placement.put(os.getpid(), under_test=name != "service")
            return await sample(requests_for(task, size), concurrency, one, cpu)

        return name, run_slice

    for round_no in range(args.rounds):
        for task in ("read", "seed"):
            for concurrency in (1, args.concurrency):
                cell = await taking_turns(
                    [loop_way(name, one, cpu, task, concurrency) for name, one, cpu in loop_ways],
                    args.runs,
                    round_no,
                )
                for name, measured in cell.items():
                    results.setdefault(("loop", task, str(concurrency), name), []).append(measured)
        placement.put(os.getpid(), under_test=False)  # from here on it is the load generator
        http = (
            await sample(
                [None] * args.runs * 4, args.concurrency, ways.http_round_trip, time.process_time
            )
        ).measured()
        results.setdefault(("http", str(args.concurrency)), []).append(http)
        mcp_cell = await taking_turns(
            [(name, callers.calls) for name, callers in servers], args.calls, round_no
        )
        for name, measured in mcp_cell.items():
            results.setdefault(("mcp", name), []).append(measured)
        print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return results


# -- the report ----------------------------------------------------------------------------


def spread(values: list[float], digits: int) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )


def row(label: str, cells: list[Measured]) -> str:
    return (
        f"  {label:24s}"
        f"{spread([c.rate for c in cells], 1):>24s}"
        f"{spread([c.p50_ms for c in cells], 1):>24s}"
        f"{spread([c.p99_ms for c in cells], 1):>24s}"
        f"{spread([c.cpu_ms for c in cells], 2):>24s}"
    )


def paired(numerator: list[Measured], denominator: list[Measured], field: str) -> str:
    """The median of the per-round ratios, with their range: a difference smaller than the
    range is not one the rounds can tell from noise."""
    ratios = [
        float(getattr(n, field)) / float(getattr(d, field))
        for n, d in zip(numerator, denominator, strict=True)
    ]
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


def report(
    args: argparse.Namespace, results: dict[Key, list[Measured]], placement: Placement
) -> str:
    head = f"  {'':24s}{'runs/s':>24s}{'p50 ms':>24s}{'p99 ms':>24s}{'CPU ms/run':>24s}"
    lines = [
        f"{args.rounds} rounds, {args.runs} runs per cell in {args.slices} slices, the ways "
        "taking turns; "
        "median [min-max] over the rounds; ratios are medians of per-round ratios [their range]",
        f"{placement.describe()}",
        "",
    ]
    http = results[("http", str(args.concurrency))]
    for task, what in (("read", "search, answer"), ("seed", "search, submit, answer")):
        for concurrency in (1, args.concurrency):
            key = ("loop", task, str(concurrency))
            engine, service, seed = (
                results[(*key, name)] for name in ("engine", "service", "seed script")
            )
            lines.append(f"loop, {task} task ({what}), concurrency {concurrency}")
            lines.append(head)
            lines.append(row("engine in-process", engine))
            lines.append(row("service over HTTP", service))
            lines.append(row("seed script (connect/run)", seed))
            p99_gap = statistics.median(
                s.p99_ms - e.p99_ms for s, e in zip(service, engine, strict=True)
            )
            lines.append(
                f"  service/engine: CPU/run {paired(service, engine, 'cpu_ms')}, "
                f"runs/s {paired(service, engine, 'rate')}, "
                f"p99 {paired(service, engine, 'p99_ms')} ({p99_gap:+.1f} ms)"
            )
            lines.append(f"  engine/seed script: runs/s {paired(engine, seed, 'rate')}")
            lines.append("")
    lines.append(
        f"HTTP round trip to the service (GET /healthz, concurrency {args.concurrency}): "
        f"p50 {spread([h.p50_ms for h in http], 2)} ms, "
        f"p99 {spread([h.p99_ms for h in http], 2)} ms"
    )
    lines.append("")
    ours, minimal = results[("mcp", "ours")], results[("mcp", "minimal")]
    lines.append(f"MCP search_leaves, {MCP_CLIENTS} clients, {args.calls} calls per cell")
    lines.append(head.replace("runs/s", "calls/s").replace("ms/run", "ms/call"))
    lines.append(row("ours (auth, db, metrics)", ours))
    lines.append(row("minimal MCP SDK server", minimal))
    lines.append(
        f"  ours/minimal: calls/s {paired(ours, minimal, 'rate')}, "
        f"CPU/call {paired(ours, minimal, 'cpu_ms')}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=60, help="runs per cell")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--calls", type=int, default=400, help="MCP calls per cell")
    parser.add_argument(
        "--slices",
        type=int,
        default=SLICES,
        help="each cell's runs (calls) in this many slices, the ways taking turns",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="leave every process where the scheduler puts it",
    )
    args = parser.parse_args()
    placement = Placement.split() if args.pin else Placement()
    # everything started from here on inherits the helpers' CPUs; the process under test of
    # each cell is then moved onto its own
    placement.put(os.getpid(), under_test=False)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        # the loop's: its database gets the drafts the seed task submits
        mcp, db_url, _ = stack.enter_context(leave_mcp_server(workdir, "loop-leaves"))
        # the one next to the minimal server: the demo data only, as a deployment has it
        # (its one employee's thousands of drafts would make every search read them all)
        measured_mcp, _, mcp_process = stack.enter_context(
            leave_mcp_server(workdir, "measured-leaves")
        )
        sim = stack.enter_context(model_simulator(workdir, profile="instant", log_level="warning"))
        seed_runs = (args.rounds * 2 * args.runs + WARM_RUNS) * 3  # per round: 2 loads, 3 ways
        reasons = make_drafts(db_url, seed_runs)
        loop_port = free_port()
        loop_env = {
            "LOOP_PORT": str(loop_port),
            "LOOP_MODEL_BASE_URL": f"{sim}/v1",
            "LOOP_MCP_URL": f"{mcp}/mcp",
            "LOOP_STORE_URL": f"sqlite:///{workdir / 'loop.db'}",
            "LOOP_LOG_LEVEL": "warning",
        }
        loop_url = f"http://127.0.0.1:{loop_port}"
        service = stack.enter_context(
            running(["loop"], loop_env, workdir / "loop.log", f"{loop_url}/healthz")
        )
        payload = asyncio.run(search_payload(f"{measured_mcp}/mcp"))
        minimal_url, minimal_pid = stack.enter_context(minimal_server(workdir, payload))
        # under test in their own cells, idle in the others
        for pid in (service.process.pid, mcp_process.process.pid, minimal_pid):
            placement.put(pid, under_test=True)

        async def main_async() -> dict[Key, list[Measured]]:
            ways = LoopWays(f"{mcp}/mcp", f"{sim}/v1", loop_url, service.process.pid)
            try:
                async with AsyncExitStack() as clients:
                    servers = [
                        (
                            "ours",
                            await McpCallers(f"{measured_mcp}/mcp", mcp_process.process.pid).open(
                                clients
                            ),
                        ),
                        ("minimal", await McpCallers(minimal_url, minimal_pid).open(clients)),
                    ]
                    return await run_rounds(args, ways, reasons, servers, placement)
            finally:
                await ways.close()

        print(report(args, asyncio.run(main_async()), placement))


if __name__ == "__main__":
    main()
