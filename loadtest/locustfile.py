"""Locust users for the leave copilot: whole agent runs (through the loop's runs API or its
OpenAI-compatible facade), and raw streaming chat completions to the model.

Run it through `python -m loadtest` (or `make load`), which prepares the model user's requests,
starts Locust and writes summary.json; `locust -f loadtest/locustfile.py` with LOAD_* settings
and LOAD_RESULTS_RUN_DIR set works too (web UI), and so does a worker
(`locust -f loadtest/locustfile.py --worker --master-host …`), which takes the master's.
Timing comes from loadtest.client, not from Locust's HTTP clients (see there); every request
also goes to the raw log the summary reads.

The agent and facade users' scenarios are the seed scenarios (stack.demo.SCENARIOS), each on a
leave of the user's own in the state it needs, made just before through the MCP server
(loadtest.leaves): a submit has a draft to submit, a cancel an approved leave to cancel, what
ever the demo or an earlier run did to the seeded leaves.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

from locust import LoadTestShape, User, events, task
from locust.runners import WorkerRunner

from loadtest.client import StreamingClient, timed_chat, timed_run
from loadtest.leaves import Leave, OwnLeaves, SetupError
from loadtest.mcp import McpClient, McpError, ToolRefused
from loadtest.results import STEPS_FILE, RawLog, step_missed_slo
from loadtest.scenarios import AGENT_MIX, FACADE_MIX, facade_messages
from loadtest.settings import LoadSettings

# A worker replaces both with the master's when the test starts (see _take_the_masters).
SETTINGS = LoadSettings()
RUN_DIR = Path(os.environ.get("LOAD_RESULTS_RUN_DIR", SETTINGS.results_dir))
REQUESTS_FILE = "model_requests.json"
SETUP_ERRORS = (SetupError, McpError, ToolRefused, OSError)


def own_leaves() -> OwnLeaves:
    """A user's own leaves on the MCP server: made as the employee, approved by the manager."""
    return OwnLeaves(
        McpClient(SETTINGS.mcp_url, SETTINGS.token),
        McpClient(SETTINGS.mcp_url, SETTINGS.manager_token),
        random.Random(),
    )


def prepare(leaves: OwnLeaves, needs: str) -> Leave:
    if needs == "draft":
        return leaves.draft()
    if needs == "approved":
        return leaves.approved()
    return leaves.kept()


def put_away(leaves: OwnLeaves, leave: Leave, needs: str) -> None:
    """After the scenario, a leave made for it alone is retired (its day and balance free)."""
    if needs == "kept":
        return
    try:
        leaves.retire(leave)
    except SETUP_ERRORS as error:  # the run is measured already: say so, go on
        logging.warning("could not retire %s (%s): %s", leave.leave_id, leave.reason, error)


_raw: RawLog | None = None


def raw_log() -> RawLog:
    global _raw
    if _raw is None:
        _raw = RawLog(RUN_DIR)
    return _raw


def _fire(
    user: User, kind: str, name: str, ms: float, tokens: int, error: Exception | None
) -> None:
    user.environment.events.request.fire(
        request_type=kind,
        name=name,
        response_time=ms,
        response_length=tokens,
        exception=error,
        context={},
    )


def _failed(user: User, record: dict[str, Any], start: float, error: Exception, name: str) -> None:
    """Log a failed request to the raw log and to Locust, under its kind and `name`."""
    record.update(start=start, end=time.time(), ok=False, error=str(error)[:300])
    raw_log().write(record)
    _fire(user, record["kind"], name, (time.time() - start) * 1000, 0, error)


class ModelUser(User):
    """Streaming chat completions straight to vLLM (or the simulator)."""

    def wait_time(self) -> float:
        return (
            random.expovariate(1 / SETTINGS.model_think_seconds)
            if SETTINGS.model_think_seconds
            else 0
        )

    def on_start(self) -> None:
        self.client = StreamingClient(SETTINGS.model_url)
        prepared = json.loads((RUN_DIR / REQUESTS_FILE).read_text())
        self.tools = prepared["tools"]
        self.conversations = prepared["conversations"]
        self.model = self.client.request_json("GET", "/models")["data"][0]["id"]

    def on_stop(self) -> None:
        self.client.close()

    @task
    def chat(self) -> None:
        conversation = random.choice(self.conversations)
        body = {
            "model": self.model,
            "messages": conversation["messages"],
            "tools": self.tools,
            "max_tokens": SETTINGS.max_tokens,
        }
        start = time.time()
        record: dict[str, Any] = {"kind": "model", "name": f"history-{len(body['messages'])}"}
        try:
            s = timed_chat(self.client, body)
        except Exception as error:
            _failed(self, record, start, error, "ttft")
            return
        record.update(
            start=start,
            end=time.time(),
            ok=True,
            error=None,
            id=s.id,
            ttft_ms=s.ttft_ms,
            itl_ms=s.itl_ms,
            tpot_ms=s.tpot_ms,
            e2e_ms=s.e2e_ms,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
        )
        raw_log().write(record)
        _fire(self, "model", "ttft", s.ttft_ms, 0, None)
        if s.tpot_ms is not None:
            _fire(self, "model", "tpot", s.tpot_ms, 0, None)
        _fire(self, "model", "e2e", s.e2e_ms, s.output_tokens, None)


class AgentUser(User):
    """A person using the copilot: whole runs through the loop's API, each on a leave of its
    own in the state the scenario needs."""

    def wait_time(self) -> float:
        return random.expovariate(1 / SETTINGS.think_seconds) if SETTINGS.think_seconds else 0

    def on_start(self) -> None:
        headers = {"Authorization": f"Bearer {SETTINGS.token}"}
        self.stream_client = StreamingClient(SETTINGS.loop_url, headers)
        self.control_client = StreamingClient(SETTINGS.loop_url, headers)
        self.leaves = own_leaves()

    def on_stop(self) -> None:
        self.stream_client.close()
        self.control_client.close()
        try:
            self.leaves.close()
        except SETUP_ERRORS as error:
            logging.warning("could not give back the user's leaves: %s", error)

    @task
    def agent_run(self) -> None:
        scenario = random.choices(AGENT_MIX, weights=[m.weight for m in AGENT_MIX])[0]
        start = time.time()
        try:
            leave = prepare(self.leaves, scenario.needs)
        except SETUP_ERRORS as error:
            record = {"kind": "agent", "name": scenario.name}
            _failed(self, record, start, RuntimeError(f"setup: {error}"), "run")
            return
        text = scenario.request.format(reason=leave.reason)
        session = self._run(scenario.name, text, scenario.answer, None)
        if scenario.follow_up and session:
            self._run(scenario.name, scenario.follow_up, None, session)
        put_away(self.leaves, leave, scenario.needs)

    def _run(self, name: str, text: str, answer: str | None, session: str | None) -> str | None:
        start = time.time()
        record: dict[str, Any] = {"kind": "agent", "name": name}
        try:
            s = timed_run(self.stream_client, self.control_client, text, answer, session)
            if s.status not in ("completed", "max_turns"):
                raise RuntimeError(f"run {s.status}")
        except Exception as error:
            _failed(self, record, start, error, "run")
            return None
        record.update(
            start=start,
            end=time.time(),
            ok=True,
            error=None,
            status=s.status,
            first_answer_ms=s.first_answer_ms,
            run_ms=s.run_ms,
            turns=s.turns,
            tool_calls=s.tool_calls,
            tools=s.tools,
            tool_errors=s.tool_errors,
            confirmations=s.confirmations,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
        )
        raw_log().write(record)
        if s.first_answer_ms is not None:
            _fire(self, "agent", "first answer token", s.first_answer_ms, 0, None)
        _fire(self, "agent", "run", s.run_ms, s.output_tokens, None)
        return s.session_id


class FacadeUser(User):
    """An OpenAI client of the copilot: streamed chat completions on the loop's facade, where
    one completion is a whole agent run and the model is the agent's name (GET /v1/models);
    each on a leave of its own, as the agent user's."""

    def wait_time(self) -> float:
        return random.expovariate(1 / SETTINGS.think_seconds) if SETTINGS.think_seconds else 0

    def on_start(self) -> None:
        headers = {"Authorization": f"Bearer {SETTINGS.token}"}
        self.client = StreamingClient(f"{SETTINGS.loop_url.rstrip('/')}/v1", headers)
        self.model = self.client.request_json("GET", "/models")["data"][0]["id"]
        self.leaves = own_leaves()

    def on_stop(self) -> None:
        self.client.close()
        try:
            self.leaves.close()
        except SETUP_ERRORS as error:
            logging.warning("could not give back the user's leaves: %s", error)

    @task
    def chat(self) -> None:
        scenario = random.choices(FACADE_MIX, weights=[m.weight for m in FACADE_MIX])[0]
        start = time.time()
        record: dict[str, Any] = {"kind": "facade", "name": scenario.name}
        try:
            leave = prepare(self.leaves, scenario.needs)
        except SETUP_ERRORS as error:
            _failed(self, record, start, RuntimeError(f"setup: {error}"), "run")
            return
        messages = facade_messages(scenario, leave)
        start = time.time()
        try:
            s = timed_chat(self.client, {"model": self.model, "messages": messages})
            # the facade ends a run that did not complete (failed, cancelled, turn limit) with
            # finish_reason "length" and the status as its text: not an answer
            if s.finish_reason != "stop":
                raise RuntimeError(f"run did not complete (finish_reason {s.finish_reason})")
        except Exception as error:
            _failed(self, record, start, error, "run")
            put_away(self.leaves, leave, scenario.needs)
            return
        record.update(
            start=start,
            end=time.time(),
            ok=True,
            error=None,
            first_answer_ms=s.ttft_ms,
            run_ms=s.e2e_ms,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
            finish_reason=s.finish_reason,
        )
        raw_log().write(record)
        _fire(self, "facade", "first answer token", s.ttft_ms, 0, None)
        _fire(self, "facade", "run", s.e2e_ms, s.output_tokens, None)
        put_away(self.leaves, leave, scenario.needs)


class LoadShape(LoadTestShape):
    """constant (LOAD_USERS for LOAD_DURATION_SECONDS), steps (users rising each step) or
    spike (a baseline, LOAD_SPIKE_FACTOR × the users for LOAD_SPIKE_SECONDS, the baseline again).

    It runs where the users are counted (the master, or the only process) and writes each
    step's wall-clock start (and phase) to steps.jsonl, which the summary cuts the raw log by."""

    def __init__(self) -> None:
        super().__init__()
        self.schedule = SETTINGS.schedule()
        self.current = -1

    def tick(self) -> tuple[int, float] | None:
        run_time = self.get_run_time()
        if run_time >= SETTINGS.total_seconds():
            return None
        step = 0
        for k, planned in enumerate(self.schedule):
            if run_time >= planned.offset:
                step = k
        users, phase = self.schedule[step].users, self.schedule[step].phase
        if step != self.current:
            if self.current >= 0 and SETTINGS.shape == "steps" and SETTINGS.stop_at_break:
                missed = step_missed_slo(RUN_DIR, SETTINGS.slo())
                if missed:
                    # past the knee: more users only add load that cannot meet the SLO
                    logging.info("step %d missed the SLO (%s): sweep ends", self.current, missed)
                    return None
            self.current = step
            RUN_DIR.mkdir(parents=True, exist_ok=True)
            with (RUN_DIR / STEPS_FILE).open("a") as steps:
                line = {"step": step, "users": users, "start": time.time()}
                steps.write(json.dumps(line | ({"phase": phase} if phase else {})) + "\n")
        return users, SETTINGS.spawn_rate


# Distributed runs: the master's settings and results folder are the run's. Locust forwards
# custom arguments to its workers with every spawn message, so workers on other hosts (or
# started with other LOAD_* variables) load what the master was told to, and write their raw
# logs where it reads them (a folder they share: see docs/loadtest.md).
@events.init_command_line_parser.add_listener
def _shared_settings_argument(parser: Any) -> None:
    parser.add_argument(
        "--loadtest-shared",
        default="",
        include_in_web_ui=False,
        help="set by the master for its workers: the run's LOAD_* settings and results folder",
    )


@events.init.add_listener
def _share_the_masters(environment: Any, **_kwargs: Any) -> None:
    if environment.parsed_options is not None and not isinstance(environment.runner, WorkerRunner):
        shared = {"settings": SETTINGS.model_dump(), "run_dir": str(RUN_DIR)}
        environment.parsed_options.loadtest_shared = json.dumps(shared)


@events.test_start.add_listener
def _take_the_masters(environment: Any, **_kwargs: Any) -> None:
    global SETTINGS, RUN_DIR
    shared = getattr(environment.parsed_options, "loadtest_shared", "")
    if isinstance(environment.runner, WorkerRunner) and shared:
        received = json.loads(shared)
        SETTINGS = LoadSettings(**received["settings"])
        RUN_DIR = Path(received["run_dir"])


@events.quitting.add_listener
def _close_raw_log(environment: Any, **_kwargs: Any) -> None:
    if _raw is not None:
        _raw.close()
