"""Each scenario sample through the real loop and a scratch MCP server of its own data.

The MCP server and the loop are started as processes (the same `python -m` commands as in
production) in a scratch folder; before each sample the leave database is put back to the
demo data, so every sample starts from the same state whatever the one before it did. The
model is whatever OpenAI-compatible endpoint is given: a candidate vLLM replica, the router,
the simulator.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from sqlalchemy.orm import Session

from common.contract import PERSON_SAID, StepKind
from common.credentials import hash_token
from common.run_client import RunClient, RunRefused, StreamEnded, always
from common.runs_protocol import Run, Step
from loop.export import training_example
from loop.store import RunRecord, SyncRunStore
from mcp_server.leaves import new_leave_id, working_days
from mcp_server.seed import START_BALANCE, seed
from mcp_server.storage import (
    ApiToken,
    AuditEntry,
    Balance,
    Database,
    Employee,
    Leave,
    new_token_id,
)
from ops.services import loop_service, mcp_server

from .malformed import MalformedCall, malformed_calls
from .scenarios import EndState, LeaveRow, Scenario, Turn, on, reached, text_of, untrue_claims


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
    malformed_calls: list[MalformedCall] = field(default_factory=list)
    # a failing sample's conversation as the loop recorded it (messages, tools), for
    # `python -m evals export-failures`
    transcript: dict[str, Any] | None = None
    # and the calls a right run makes, where the scenario knows them: tool and the arguments
    # that must be so (the others are the model's to word), with this sample's ids and dates
    right_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.error is None and (not self.goal or bool(self.untrue) or self.malformed > 0)


class ScratchStack:
    """The MCP server and the loop for the suite, on `model_url`."""

    def __init__(self, workdir: Path, model_url: str, model_name: str | None) -> None:
        self.workdir, self.model_url, self.model_name = workdir, model_url, model_name
        self.db_url = f"sqlite:///{workdir / 'leave.db'}"
        self.database = Database(self.db_url)
        self.loop = ""
        self.runs: SyncRunStore | None = None

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
            self.loop, store_url = stack.enter_context(
                loop_service(self.workdir, self.model_url, f"{mcp}/mcp",
                             f"sqlite:///{self.workdir / 'loop.db'}", **settings)
            )  # fmt: skip
            self.runs = SyncRunStore(store_url)  # read only: a failing sample's conversation
            yield self
            self.runs.engine.dispose()
        self.database.dispose()

    def reset(self, scenario: Scenario, today: dt.date) -> dict[str, str]:
        """The demo data again, plus the leaves the scenario starts with; the ids by reason."""
        seed(self.database, reset=True, today=today)
        with self.database.write() as s:
            for person in scenario.people:  # in the file's order: a manager before their reports
                s.add(Employee(id=person.employee_id, name=person.name,
                               manager_id=person.manager_id, source="demo"))  # fmt: skip
                s.flush()
                s.add(ApiToken(token_sha256=hash_token(person.token), is_demo=True,
                               employee_id=person.employee_id, public_id=new_token_id(),
                               label="eval"))  # fmt: skip
                for leave_type, days in START_BALANCE.items():
                    s.add(Balance(employee_id=person.employee_id, leave_type=leave_type,
                                  remaining_days=days))  # fmt: skip
            for leave in scenario.before:
                start, end = on(leave.start, today), on(leave.end, today)
                s.add(Leave(id=leave.id or new_leave_id(), employee_id=leave.owner,
                            leave_type=leave.leave_type, start_date=start, end_date=end,
                            days=float(working_days(start, end)), status=leave.status,
                            reason=leave.reason))  # fmt: skip
        with self.database.read() as s:
            return {leave.reason: leave.id for leave in s.query(Leave)}

    def end_state(
        self, steps: list[Step], before: set[str], answer: str, today: dt.date
    ) -> EndState:
        with self.database.read() as s:
            leaves = s.query(Leave).all()
            audit = s.query(AuditEntry).order_by(AuditEntry.id).all()
            balances = {(b.employee_id, b.leave_type): b.remaining_days
                        for b in s.query(Balance)}  # fmt: skip
        rows = [LeaveRow(v.id, v.employee_id, v.reason, v.leave_type, v.start_date, v.end_date,
                         v.days, v.status) for v in leaves]  # fmt: skip
        return EndState(
            {leave.reason: leave.status for leave in leaves},
            {leave.id for leave in leaves},
            [(a.tool, a.from_status, a.to_status) for a in audit if a.outcome == "applied"],
            [(a.tool, a.confirmation) for a in audit if a.outcome != "applied"],
            [step.name for step in steps if step.type == StepKind.TOOL],
            rows,
            frozenset(before),
            balances,
            answer,
            today,
        )

    def transcript(self, run_id: str) -> dict[str, Any] | None:
        """The run's conversation (with its session's earlier turns) and tools, as the loop's
        own export writes it."""
        if self.runs is None:
            return None
        with Session(self.runs.engine) as s:
            record = s.get(RunRecord, run_id)
            return training_example(record) if record is not None else None


def run_sample(stack: ScratchStack, scenario: Scenario, number: int) -> Sample:
    today = dt.date.today()  # the server's today: relative dates are scored against it
    ids = stack.reset(scenario, today)
    started = time.monotonic()
    finals: list[Run] = []
    session: str | None = None
    asked = [text_of(turn.text, ids, today) for turn in scenario.turns]
    try:
        for turn, text in zip(scenario.turns, asked, strict=True):
            final = asyncio.run(_run(stack.loop, text, turn, session))
            finals.append(final)
            session = final.session_id or session
    except (httpx2.HTTPError, RunRefused, StreamEnded) as error:
        return _unscored(scenario, number, f"{type(error).__name__}: {error}")
    seconds = time.monotonic() - started
    steps = [step for final in finals for step in final.steps or []]
    answer = finals[-1].answer or ""
    end = stack.end_state(steps, set(ids.values()), answer, today)
    wrong = malformed_calls(steps)
    sample = Sample(
        scenario=scenario.name,
        sample=number,
        goal=reached(scenario, end, finals[-1].status, answer),
        status=finals[-1].status,
        refusals=[code for code in map(Step.refusal, steps) if code and code not in PERSON_SAID],
        malformed=len(wrong),
        untrue=untrue_claims(answer, end, " ".join(asked)),
        turns=sum(final.turns or 0 for final in finals),
        prompt_tokens=sum(final.prompt_tokens for final in finals),
        completion_tokens=sum(final.completion_tokens for final in finals),
        seconds=seconds,
        answer=answer,
        malformed_calls=wrong,
    )
    if sample.failed:
        sample.transcript = stack.transcript(finals[-1].id)
        sample.right_calls = [
            {"name": call.tool,
             "arguments": {k: text_of(v, ids, today) for k, v in call.arguments.items()}}
            for call in scenario.right_calls
        ]  # fmt: skip
    return sample


async def _run(loop: str, text: str, turn: Turn, session: str | None) -> Run:
    """One streamed run; its confirmations answered as the turn says (decline if it says
    nothing: a person who did not ask for a change does not confirm one)."""
    async with RunClient(loop, turn.token, timeout=httpx2.Timeout(30, read=600)) as client:
        return await client.run(text, answer=always(turn.answer or "decline"), session_id=session)


def _unscored(scenario: Scenario, number: int, error: str) -> Sample:
    return Sample(scenario.name, number, False, "error", [], 0, [], 0, 0, 0, 0.0, "", error)
