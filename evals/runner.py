"""Each scenario sample through the real loop and a scratch MCP server of its own data.

The MCP server and the loop are started as processes (the same `python -m` commands as in
production) in a scratch folder; before each sample the leave database is put back to the
demo data, so every sample starts from the same state whatever the one before it did. The
model is whatever OpenAI-compatible endpoint is given: a candidate vLLM replica, the router,
the simulator.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from common import sse
from mcp_server.seed import seed
from mcp_server.storage import AuditEntry, Database, Leave
from stack.processes import loop_service, mcp_server

from .scenarios import INJECTED, EndState, Scenario, Turn, reached, untrue_claims

# A tool call the model got wrong before any server saw it: bad arguments, no such tool.
MODEL_ERRORS = ("invalid_arguments", "unknown_tool")
# Tool errors that are the person's answer, not a mistake of the model's.
PERSON_SAID = ("confirmation_declined", "confirmation_cancelled")


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

    def end_state(self, steps: list[dict[str, Any]]) -> EndState:
        with self.database.read() as s:
            leaves = s.query(Leave).all()
            audit = s.query(AuditEntry).order_by(AuditEntry.id).all()
        return EndState(
            {leave.reason: leave.status for leave in leaves},
            {leave.id for leave in leaves},
            [(a.tool, a.from_status, a.to_status) for a in audit if a.outcome == "applied"],
            [(a.tool, a.confirmation) for a in audit if a.outcome != "applied"],
            [str(step.get("name")) for step in steps if step.get("type") == "tool"],
        )


def run_sample(stack: ScratchStack, scenario: Scenario, number: int) -> Sample:
    ids = stack.reset(scenario)
    started = time.monotonic()
    finals: list[dict[str, Any]] = []
    session: str | None = None
    try:
        for turn in scenario.turns:
            final = _run(stack.loop, _text(turn.text, ids), turn, session)
            finals.append(final)
            session = final.get("session_id") or session
    except (httpx.HTTPError, RuntimeError) as error:
        return _unscored(scenario, number, f"{type(error).__name__}: {error}")
    seconds = time.monotonic() - started
    steps = [step for final in finals for step in final.get("steps") or []]
    end = stack.end_state(steps)
    answer = finals[-1].get("answer") or ""
    return Sample(
        scenario=scenario.name,
        sample=number,
        goal=reached(scenario, end, finals[-1]["status"], answer),
        status=finals[-1]["status"],
        refusals=[code for code in map(_refusal, steps) if code and code not in PERSON_SAID],
        malformed=sum(1 for step in steps if _malformed(step)),
        untrue=untrue_claims(answer, end, " ".join(_text(t.text, ids) for t in scenario.turns)),
        turns=sum(final.get("turns") or 0 for final in finals),
        prompt_tokens=sum((final.get("usage") or {}).get("prompt_tokens", 0) for final in finals),
        completion_tokens=sum(
            (final.get("usage") or {}).get("completion_tokens", 0) for final in finals
        ),
        seconds=seconds,
        answer=answer,
    )


def _text(template: str, ids: dict[str, str]) -> str:
    """`{id:DRAFT}` becomes the id of the scenario's leave of that name."""
    from . import scenarios

    return re.sub(r"\{id:(\w+)\}", lambda m: ids[getattr(scenarios, m.group(1))], template)


def _run(loop: str, text: str, turn: Turn, session: str | None) -> dict[str, Any]:
    """One streamed run; its confirmations answered as the turn says (decline if it says
    nothing: a person who did not ask for a change does not confirm one)."""
    headers = {"Authorization": f"Bearer {turn.token}"}
    body: dict[str, Any] = {"input": text, "stream": True}
    if session:
        body["session_id"] = session
    run_id = ""
    timeout = httpx.Timeout(30, read=600)
    with (
        httpx.Client(base_url=loop, headers=headers, timeout=timeout) as http,
        http.stream("POST", "/v1/runs", json=body) as response,
    ):
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"the loop answered {response.status_code}: {response.text[:200]}")
        for event in sse.events(response.iter_lines()):
            data = event.json()
            if event.event == "run.started":
                run_id = data["id"]
            elif event.event == "confirmation.requested":
                http.post(f"/v1/runs/{run_id}/confirmations/{data['confirmation_id']}",
                          json={"action": turn.answer or "decline"}).raise_for_status()  # fmt: skip
            elif event.event == "run.finished":
                return dict(data)
    raise RuntimeError("the stream ended without run.finished")


def _refusal(step: dict[str, Any]) -> str | None:
    """The code of the rule the server refused a tool call by, if it did."""
    if step.get("error") != "tool_error":
        return None
    result = step.get("result")
    error = result.get("error") if isinstance(result, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return str(code or "unknown")


def _malformed(step: dict[str, Any]) -> bool:
    if step.get("type") == "detection":
        return step.get("name") == "tool_call_in_content"
    return step.get("type") == "tool" and step.get("error") in MODEL_ERRORS


def _unscored(scenario: Scenario, number: int, error: str) -> Sample:
    return Sample(scenario.name, number, False, "error", [], 0, [], 0, 0, 0, 0.0, "", error)
