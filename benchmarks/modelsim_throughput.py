"""Requests/s of the simulator on ONE core with the `instant` profile (no injected delay).

The simulator is pinned to core 0 and this load generator to the other core(s), so the figure
is the simulator's own ceiling. The load generator is a minimal keep-alive HTTP/1.1 client on
raw asyncio streams (a full HTTP client library would be the bottleneck first).

    python benchmarks/modelsim_throughput.py --connections 32 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from ops.services import ServiceProcess, free_port  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} of the leave system",
            "parameters": {
                "type": "object",
                "properties": {"keyword": {"type": "string", "description": "search words"}},
                "required": ["keyword"],
            },
        },
    }
    for name in (
        "search_leaves",
        "get_leave_balance",
        "update_leave_status",
        "cancel_approved_leave",
    )
]
SYSTEM = (
    "你是差勤助手。更新假單前必須先查詢取得真實 ID；"
    "假單狀態只能逐級推進；使用者拒絕後不得改用其他工具達成。"
)


def request_bytes(port: int, stream: bool) -> bytes:
    body = json.dumps(
        {
            "model": "leave-copilot",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "把我那張家庭旅遊的特休送出審核"},
            ],
            "tools": TOOLS,
            "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        },
        ensure_ascii=False,
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"HTTP {status.decode()}")
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return bytes(body)
            body += chunk[:-2]
    length = int(lowered.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    return await reader.readexactly(length)


async def connection(port: int, payload: bytes, until: float, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            writer.write(payload)
            body = await read_response(reader)
            latencies.append(time.perf_counter() - started)
            if b"tool_calls" not in body:
                raise RuntimeError(f"no tool call in {body[:200]!r}")
    finally:
        writer.close()


async def run(port: int, stream: bool, connections: int, seconds: float) -> tuple[float, float]:
    payload = request_bytes(port, stream)
    latencies: list[float] = []
    await asyncio.gather(
        *(connection(port, payload, time.perf_counter() + 1, []) for _ in range(4))
    )
    started = time.perf_counter()
    until = started + seconds
    await asyncio.gather(*(connection(port, payload, until, latencies) for _ in range(connections)))
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, statistics.median(latencies) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"SIM_PORT": str(port), "SIM_PROFILE": "instant", "SIM_LOG_LEVEL": "warning"}
        server = ServiceProcess(["modelsim"], env, Path(tmp) / "sim.log")
        pinned = len(cores) > 1 and shutil.which("taskset") is not None
        if pinned:  # the simulator gets one core; this client the rest
            os.sched_setaffinity(server.process.pid, {cores[0]})
            os.sched_setaffinity(0, set(cores[1:]))
        try:
            server.wait_ready(f"http://127.0.0.1:{port}/health")
            where = f"pinned to core {cores[0]}" if pinned else "NOT pinned (one core visible)"
            print(f"simulator (instant profile) {where}; {args.connections} keep-alive connections")
            for stream in (False, True):
                rate, p50 = asyncio.run(run(port, stream, args.connections, args.seconds))
                kind = "streaming    " if stream else "non-streaming"
                print(f"{kind} tool-call completions: {rate:7.1f} req/s   p50 {p50:6.2f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
