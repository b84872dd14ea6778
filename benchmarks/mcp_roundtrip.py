"""Tool-call round trips against a running leave MCP server: p50/p99 latency and calls/s.

Starts `python -m mcp_server` on a free port with a fresh seeded database (or uses --url),
opens N concurrent clients (each its own MCP session, as N agent runs would), and has each
make M `search_leaves` calls. Prints one line per protocol era.

    python benchmarks/mcp_roundtrip.py --clients 50 --calls 40
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from common.stats import percentile  # noqa: E402
from ops.services import ServiceProcess, free_port  # noqa: E402


async def one_client(url: str, token: str, mode: str, calls: int, latencies: list[float]) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        for _ in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("search_leaves", {"keyword": "家庭旅遊"})
            latencies.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(result.content)


async def measure(url: str, mode: str, clients: int, calls: int) -> dict[str, float]:
    latencies: list[float] = []
    tokens = ["demo-token-employee", "demo-token-other", "demo-token-manager"]
    started = time.perf_counter()
    await asyncio.gather(
        *(one_client(url, tokens[i % 3], mode, calls, latencies) for i in range(clients))
    )
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "calls": len(latencies),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "calls_per_s": len(latencies) / elapsed,
    }


def start_server(workdir: Path) -> tuple[ServiceProcess, str]:
    port = free_port()
    env = {"MCP_DATABASE_URL": f"sqlite:///{workdir / 'leave.db'}", "MCP_PORT": str(port)}
    subprocess.run(
        [sys.executable, "-m", "mcp_server", "seed"],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    server = ServiceProcess(["mcp_server"], {**env, "MCP_LOG_LEVEL": "WARNING"}, workdir / "log")
    server.wait_ready(f"http://127.0.0.1:{port}/readyz")
    return server, f"http://127.0.0.1:{port}/mcp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an already running server's /mcp URL (demo tokens)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=40, help="calls per client")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        server, url = (None, args.url) if args.url else start_server(Path(tmp))
        try:
            httpx.get(url.replace("/mcp", "/healthz"), timeout=5).raise_for_status()
            print(f"server {url}  clients={args.clients}  calls/client={args.calls}")
            eras = (("auto", "modern 2026-07-28"), ("legacy", "legacy 2025-11-25"))
            # One client shows the bare round trip; many show throughput under contention.
            for clients, calls in ((1, args.calls * 5), (args.clients, args.calls)):
                for mode, label in eras:
                    figures = asyncio.run(measure(url, mode, clients, calls))
                    print(
                        f"{label:18s} clients={clients:3d} calls={figures['calls']:5d}  "
                        f"p50={figures['p50_ms']:6.2f} ms  "
                        f"p99={figures['p99_ms']:7.2f} ms  "
                        f"throughput={figures['calls_per_s']:7.1f} calls/s"
                    )
        finally:
            if server:
                server.stop()


if __name__ == "__main__":
    main()
