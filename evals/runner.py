"""Each scenario sample through the real loop and a scratch MCP server of its own data.

The MCP server and the loop are started as processes (the same `python -m` commands as in
production) in a scratch folder; before each sample the leave database is put back to the
demo data, so every sample starts from the same state whatever the one before it did. The
model is whatever OpenAI-compatible endpoint is given: a candidate vLLM replica, the router,
the simulator.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

from common.contract import PERSON_SAID, StepKind, StepOutcome
from common.run_client import RunClient, RunRefused, StreamEnded, always
from common.runs_protocol import DetectionKind, Run, Step
from mcp_server.seed import seed
from mcp_server.storage import AuditEntry, Database, Leave
from ops.services import loop_service, mcp_server

from .scenarios import INJECTED, EndState, Scenario, Turn, reached, untrue_claims

# A tool call the model got wrong before any server saw it: bad arguments, no such tool.
MODEL_ERRORS = (StepOutcome.INVALID_ARGUMENTS, StepOutcome.UNKNOWN_TOOL)


@dataclass
class Sample:
    """One run of a scenario, as scored."""

    scenario: str
    sample: int
    goal: bool
    status: str  # the last turn's run status
    refusals: list[str]  # the codes of the tool errors the server answered
    malformed: int  # tool calls with bad arguments or to no tool, and calls written as text
    untrue: list[str]
    turns: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    answer: str
    error: str | None = None  # the sample could not be run (the endpoint failed): not scored


class ScratchStack:
    """The MCP server and the loop for the suite, on `model_url`."""

    def __init__(self, workdir: Path, model_url: str, model_name: str | None) -> None:
        self.workdir, self.model_url, self.model_name = workdir, model_url, model_name
        self.db_url = f"sqlite:///{workdir / 'leave.db'}"
        self.database = Database(self.db_url)
        self.loop = ""

    @contextmanager
    def started(self) -> Iterator[ScratchStack]:
        with ExitStack() as stack:
            # the scratch server holds the demo data whatever MCP_ENV the caller's shell has
            mcp = stack.enter_context(
                mcp_server(self.workdir, self.db_url, seed=False, MCP_ENV="development")
            )
            settings = {"confirmation_timeout_seconds": "30"}
            if self.model_name:
                settings["model_name"] = self.model_name
            self.loop, _ = stack.enter_context(
                loop_service(self.workdir, self.model_url, f"{mcp}/mcp",
                             f"sqlite:///{self.workdir / 'loop.db'}", **settings)
            )  # fmt: skip
            yield self
        self.database.dispose()

    def reset(self, scenario: Scenario) -> dict[str, str]:
        """The demo data again, plus what the scenario adds; the leave ids by reason."""
        seed(self.database, reset=True)
        if "injected" in scenario.setup:
            with self.database.write() as s:
                draft = s.query(Leave).filter(Leave.reason.like("家庭旅遊%")).one()
                s.add(Leave(id="LV-1ec7ed", employee_id="E001", leave_type="事假",
                            start_date=draft.start_date, end_date=draft.start_date, days=1,
                            status="draft", reason=INJECTED))  # fmt: skip
        with self.database.read() as s:
            return {leave.reason: leave.id for leave in s.query(Leave)}

    def end_state(self, steps: list[Step]) -> EndState:
        with self.database.read() as s:
            leaves = s.query(Leave).all()
            audit = s.query(AuditEntry).order_by(AuditEntry.id).all()
        return EndState(
            {leave.reason: leave.status for leave in leaves},
            {leave.id for leave in leaves},
            [(a.tool, a.from_status, a.to_status) for a in audit if a.outcome == "applied"],
            [(a.tool, a.confirmation) for a in audit if a.outcome != "applied"],
            [step.name for step in steps if step.type == StepKind.TOOL],
        )


def run_sample(stack: ScratchStack, scenario: Scenario, number: int) -> Sample:
    ids = stack.reset(scenario)
    started = time.monotonic()
    finals: list[Run] = []
    session: str | None = None
    try:
        for turn in scenario.turns:
            final = asyncio.run(_run(stack.loop, _text(turn.text, ids), turn, session))
            finals.append(final)
            session = final.session_id or session
    except (httpx2.HTTPError, RunRefused, StreamEnded) as error:
        return _unscored(scenario, number, f"{type(error).__name__}: {error}")
    seconds = time.monotonic() - started
    steps = [step for final in finals for step in final.steps or []]
    end = stack.end_state(steps)
    answer = finals[-1].answer or ""
    return Sample(
        scenario=scenario.name,
        sample=number,
        goal=reached(scenario, end, finals[-1].status, answer),
        status=finals[-1].status,
        refusals=[code for code in map(Step.refusal, steps) if code and code not in PERSON_SAID],
        malformed=sum(1 for step in steps if _malformed(step)),
        untrue=untrue_claims(answer, end, " ".join(_text(t.text, ids) for t in scenario.turns)),
        turns=sum(final.turns or 0 for final in finals),
        prompt_tokens=sum(final.prompt_tokens for final in finals),
        completion_tokens=sum(final.completion_tokens for final in finals),
        seconds=seconds,
        answer=answer,
    )


def _text(template: str, ids: dict[str, str]) -> str:
    """`{id:DRAFT}` becomes the id of the scenario's leave of that name."""
    from . import scenarios

    return re.sub(r"\{id:(\w+)\}", lambda m: ids[getattr(scenarios, m.group(1))], template)


async def _run(loop: str, text: str, turn: Turn, session: str | None) -> Run:
    """One streamed run; its confirmations answered as the turn says (decline if it says
    nothing: a person who did not ask for a change does not confirm one)."""
    async with RunClient(loop, turn.token, timeout=httpx2.Timeout(30, read=600)) as client:
        return await client.run(text, answer=always(turn.answer or "decline"), session_id=session)


def _malformed(step: Step) -> bool:
    if step.type == StepKind.DETECTION:
        return step.name == DetectionKind.TOOL_CALL_IN_CONTENT
    return step.type == StepKind.TOOL and step.error in MODEL_ERRORS


def _unscored(scenario: Scenario, number: int, error: str) -> Sample:
    return Sample(scenario.name, number, False, "error", [], 0, [], 0, 0, 0, 0.0, "", error)
