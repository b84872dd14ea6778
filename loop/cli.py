"""A terminal client: `python -m loop.cli "把我那張家庭旅遊的特休送出審核"`.

Streams the run's steps and asks confirmation questions at the prompt, as the seed script did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import assert_never

import httpx2

from common.contract import step_failed
from common.run_client import RunClient, RunRefused, StreamEnded
from common.runs_protocol import (
    AnswerDelta,
    ConfirmAction,
    ConfirmationRequested,
    ConfirmationResolved,
    Detection,
    ModelFinished,
    ModelStarted,
    Run,
    RunEvent,
    RunFinished,
    RunStarted,
    ToolFinished,
    ToolStarted,
    WaitingConfirmation,
)

# How long a run whose stream ended early is followed (its loop restarting, then the person
# answering and the run going on).
FOLLOW_SECONDS = 600.0
ANSWERS: dict[str, ConfirmAction] = {
    "y": "accept",
    "yes": "accept",
    "是": "accept",
    "c": "cancel",
    "cancel": "cancel",
}


def ask(question: str) -> ConfirmAction:
    """accept / decline / cancel from the person at the terminal; no terminal → decline."""
    try:
        reply = (
            input(f"\n❓ {question}\n   確認？ [y = 確認 / n = 拒絕 / c = 取消] ").strip().lower()
        )
    except EOFError:
        return "decline"
    return ANSWERS.get(reply, "decline")


async def ask_person(question: WaitingConfirmation) -> ConfirmAction:
    return await asyncio.to_thread(ask, question.message)  # the stream goes on meanwhile


def describe(event: RunEvent) -> str | None:
    match event:
        case ToolStarted():
            return f"🔧 {event.name}({json.dumps(event.arguments, ensure_ascii=False)})"
        case ToolFinished():
            step = event.step
            # a failed step is ✗; an outcome that still did the job (timeout_applied) is ✓
            mark = "✗" if step_failed(step.error) else "✓"
            return f"   {mark} {step.duration_ms:.0f} ms" + (
                f"  {step.error}" if step.error else ""
            )
        case ModelFinished() if event.step is not None:
            step = event.step
            calls = ", ".join(step.result["tool_calls"]) or "answer"
            tokens = f"{step.prompt_tokens}+{step.completion_tokens} tokens"
            return f"🤖 turn {event.turn}: {calls}  ({step.duration_ms:.0f} ms, {tokens})"
        case ConfirmationResolved():
            return f"   → {event.outcome}"
        case Detection():
            return f"⚠ {event.kind}: {event.detail}"
        case RunStarted():
            return f"▶ {event.id} (session {event.session_id})"
        case (
            ModelStarted()
            | AnswerDelta()
            | ModelFinished()
            | ConfirmationRequested()
            | RunFinished()
        ):
            return None
        case _:
            assert_never(event)


async def run(url: str, token: str, text: str, session_id: str | None) -> int:
    run_id = ""

    def show(event: RunEvent) -> None:
        nonlocal run_id
        if isinstance(event, RunStarted):
            run_id = event.id
        line = describe(event)
        if line:
            print(line)

    timeout = httpx2.Timeout(10, read=None)  # a run may wait minutes for the person to answer
    async with RunClient(url, token, timeout=timeout) as client:
        try:
            final = await client.run(
                text,
                answer=ask_person,
                on_event=show,
                session_id=session_id,
                confirm="ask",
                tolerate_gone=True,
            )
            return finished(final)
        except RunRefused as error:
            print(f"error {error.status}: {error.text}", file=sys.stderr)
            return 1
        except StreamEnded:
            pass
        except httpx2.TransportError:
            if not run_id:
                raise
        if not run_id:
            return 1
        # The stream ended before the run did: the loop restarted, and a run waiting for an
        # answer goes on in the loop that took it over.
        print(f"… the stream ended before the run did; following {run_id}", file=sys.stderr)
        followed = await client.follow(run_id, ask_person, seconds=FOLLOW_SECONDS)
    if followed is None:
        print(f"{run_id} is still running after {FOLLOW_SECONDS:g} s: GET /v1/runs/{run_id}")
        return 1
    return finished(followed)


def finished(final: Run) -> int:
    tokens = f"{final.prompt_tokens}+{final.completion_tokens} tokens"
    print(f"\n■ {final.status} in {final.turns} turns, {tokens}")
    print(final.answer or final.reason or "")
    return 0 if final.status == "completed" else 2


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
        return asyncio.run(run(args.url, args.token, args.text, args.session))
    except httpx2.HTTPError as error:
        print(f"cannot reach the loop at {args.url}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
