"""A terminal client: `python -m loop.cli "把我那張家庭旅遊的特休送出審核"`.

Streams the run's steps and asks confirmation questions at the prompt, as the seed script did.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import httpx2

from common import sse

# How long a run whose stream ended early is followed (its loop restarting, then the person
# answering and the run going on).
FOLLOW_SECONDS = 600.0
ANSWERS = {"y": "accept", "yes": "accept", "是": "accept", "c": "cancel", "cancel": "cancel"}


def ask(question: str) -> str:
    """accept / decline / cancel from the person at the terminal; no terminal → decline."""
    try:
        reply = (
            input(f"\n❓ {question}\n   確認？ [y = 確認 / n = 拒絕 / c = 取消] ").strip().lower()
        )
    except EOFError:
        return "decline"
    return ANSWERS.get(reply, "decline")


def describe(kind: str, data: dict[str, Any]) -> str | None:
    if kind == "tool.started":
        return f"🔧 {data['name']}({json.dumps(data['arguments'], ensure_ascii=False)})"
    if kind == "tool.finished":
        step = data["step"]
        mark = "✗" if step.get("error") else "✓"
        return f"   {mark} {step['duration_ms']:.0f} ms" + (
            f"  {step['error']}" if step.get("error") else ""
        )
    if kind == "model.finished" and "step" in data:
        step = data["step"]
        calls = ", ".join(step["result"]["tool_calls"]) or "answer"
        tokens = f"{step['prompt_tokens']}+{step['completion_tokens']} tokens"
        return f"🤖 turn {data['turn']}: {calls}  ({step['duration_ms']:.0f} ms, {tokens})"
    if kind == "confirmation.resolved":
        return f"   → {data['outcome']}"
    if kind == "detection":
        return f"⚠ {data['kind']}: {data['detail']}"
    return None


def run(url: str, token: str, text: str, session_id: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    body: dict[str, Any] = {"input": text, "stream": True, "confirm": "ask"}
    if session_id:
        body["session_id"] = session_id
    run_id = ""
    timeout = httpx2.Timeout(10, read=None)  # a run may wait minutes for the person to answer
    with httpx2.Client(base_url=url, headers=headers, timeout=timeout) as http:
        try:
            with http.stream("POST", "/v1/runs", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    print(f"error {response.status_code}: {response.text}", file=sys.stderr)
                    return 1
                for event in sse.events(response.iter_lines()):
                    kind, data = event.event, event.json()
                    if kind == "run.started":
                        run_id = data["id"]
                        print(f"▶ {run_id} (session {data['session_id']})")
                    elif kind == "confirmation.requested":
                        answer(http, run_id, data)
                    elif kind == "run.finished":
                        return finished(data)
                    else:
                        line_text = describe(kind, data)
                        if line_text:
                            print(line_text)
        except httpx2.TransportError:
            if not run_id:
                raise
        if not run_id:
            return 1
        # The stream ended before the run did: the loop restarted, and a run waiting for an
        # answer goes on in the loop that took it over.
        print(f"… the stream ended before the run did; following {run_id}", file=sys.stderr)
        return follow(http, run_id)


def answer(http: httpx2.Client, run_id: str, question: dict[str, Any]) -> None:
    """Ask the person; send their answer. 409: answered already; 404: no loop holds the
    question now (one restarting takes it over within its lease): following the run asks
    it again when it shows."""
    action = ask(question["message"])
    reply = http.post(
        f"/v1/runs/{run_id}/confirmations/{question['confirmation_id']}", json={"action": action}
    )
    if reply.status_code not in (404, 409):
        reply.raise_for_status()


def follow(http: httpx2.Client, run_id: str) -> int:
    """The run as GET /v1/runs/{id} shows it, every second, its confirmations asked, until it
    ends (a loop still starting is waited for, up to FOLLOW_SECONDS)."""
    asked: set[str] = set()
    deadline = time.monotonic() + FOLLOW_SECONDS
    pause = threading.Event()
    while time.monotonic() < deadline:
        try:
            response = http.get(f"/v1/runs/{run_id}")
        except httpx2.TransportError:
            response = None
        if response is not None and response.status_code not in (502, 503, 504):
            response.raise_for_status()
            data = response.json()
            if data["status"] != "running":
                return finished(data)
            for question in data.get("confirmations") or []:
                if question["confirmation_id"] not in asked:
                    asked.add(question["confirmation_id"])
                    answer(http, run_id, question)
        pause.wait(1.0)
    print(f"{run_id} is still running after {FOLLOW_SECONDS:g} s: GET /v1/runs/{run_id}")
    return 1


def finished(data: dict[str, Any]) -> int:
    usage = data["usage"]
    tokens = f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens"
    print(f"\n■ {data['status']} in {data['turns']} turns, {tokens}")
    print(data["answer"] or data.get("reason", ""))
    return 0 if data["status"] == "completed" else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loop.cli", description=__doc__.splitlines()[0])
    parser.add_argument("text", help="the request, e.g. 把我那張家庭旅遊的特休送出審核")
    parser.add_argument("--url", default=os.environ.get("LOOP_URL", "http://127.0.0.1:8080"))
    parser.add_argument(
        "--token",
        default=os.environ.get("LEAVE_TOKEN", "demo-token-employee"),
        help="your bearer token (env LEAVE_TOKEN; default: the demo employee)",
    )
    parser.add_argument("--session", help="continue this session id")
    args = parser.parse_args(argv)
    try:
        return run(args.url, args.token, args.text, args.session)
    except httpx2.HTTPError as error:
        print(f"cannot reach the loop at {args.url}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
