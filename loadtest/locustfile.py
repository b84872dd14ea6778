"""Locust users for the leave copilot: whole agent runs (through the loop's runs API or its
OpenAI-compatible facade), and raw streaming chat completions to the model.

Run it through `python -m loadtest` (or `make load`), which prepares the model user's requests,
starts Locust and writes summary.json; `locust -f loadtest/locustfile.py` with LOAD_* settings
and LOAD_RESULTS_RUN_DIR set works too (web UI), and so does a worker
(`locust -f loadtest/locustfile.py --worker --master-host …`), which takes the master's.
Timing comes from loadtest.client, not from Locust's HTTP clients (see there); every request
also goes to the raw log the summary reads.

The agent and facade users' scenarios are the seed scenarios (devtools.demo.SCENARIOS), each on a
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
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from locust import LoadTestShape, User, events, task
from locust.runners import WorkerRunner

from common.runs_protocol import ConfirmAction
from loadtest.client import ChatSample, RunSample, StreamingClient, timed_chat, timed_run
from loadtest.leaves import Leave, OwnLeaves, SetupError
from loadtest.mcp import McpClient, McpError, ToolRefused
from loadtest.results import STEPS_FILE, RawLog, step_missed_slo
from loadtest.scenarios import AGENT_MIX, FACADE_MIX, SAID, Scenario, facade_messages
from loadtest.settings import LoadSettings

# A worker replaces both with the master's when the test starts (see _take_the_masters).
SETTINGS = LoadSettings()
RUN_DIR = Path(os.environ.get("LOAD_RESULTS_RUN_DIR", SETTINGS.results_dir))
REQUESTS_FILE = "model_requests.json"
SETUP_ERRORS = (SetupError, McpError, ToolRefused, OSError)
Sample = TypeVar("Sample", ChatSample, RunSample)


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


def give_back(leaves: OwnLeaves) -> None:
    try:
        leaves.close()
    except SETUP_ERRORS as error:
        logging.warning("could not give back the user's leaves: %s", error)


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


@dataclass
class Figures:
    """What one measured request adds to the raw log, and what Locust is told of it: (name,
    ms, tokens) events, those without a time left out."""

    fields: dict[str, Any]
    events: list[tuple[str, float | None, int]]


def model_figures(s: ChatSample) -> Figures:
    fields = {"id": s.id, "ttft_ms": s.ttft_ms, "itl_ms": s.itl_ms, "tpot_ms": s.tpot_ms,
              "e2e_ms": s.e2e_ms, "prompt_tokens": s.prompt_tokens,
              "output_tokens": s.output_tokens}  # fmt: skip
    return Figures(fields, [("ttft", s.ttft_ms, 0), ("tpot", s.tpot_ms, 0),
                            ("e2e", s.e2e_ms, s.output_tokens)])  # fmt: skip


def run_figures(s: RunSample) -> Figures:
    fields = {"status": s.status, "first_answer_ms": s.first_answer_ms, "run_ms": s.run_ms,
              "confirmation_wait_ms": s.confirmation_wait_ms, "turns": s.turns,
              "tool_calls": s.tool_calls, "tools": s.tools,
              "tool_errors": s.tool_errors, "confirmations": s.confirmations,
              "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens,
              "call_prompt_tokens": s.call_prompt_tokens,
              "request_tokens": s.request_tokens}  # fmt: skip
    # Locust's "run" row is the working time, as summary.json's run p95 and the SLO are
    return Figures(fields, [("first answer token", s.first_answer_ms, 0),
                            ("run", s.run_ms - s.confirmation_wait_ms,
                             s.output_tokens)])  # fmt: skip


def facade_figures(s: ChatSample) -> Figures:
    """A facade completion is a whole run: its first token is the answer's."""
    fields = {"first_answer_ms": s.ttft_ms, "run_ms": s.e2e_ms, "prompt_tokens": s.prompt_tokens,
              "output_tokens": s.output_tokens, "finish_reason": s.finish_reason}  # fmt: skip
    return Figures(fields, [("first answer token", s.ttft_ms, 0),
                            ("run", s.e2e_ms, s.output_tokens)])  # fmt: skip


class MeasuredUser(User):
    """A user whose every request is measured the same way: written to the raw log the
    summary reads, and fired as Locust request events (or one failure), so a task is one
    `measure` call."""

    abstract = True
    kind = ""  # the raw log's kind, and Locust's request type
    think_setting = "think_seconds"  # the LoadSettings field of the mean pause between tasks

    def wait_time(self) -> float:
        think = float(getattr(SETTINGS, self.think_setting))
        return random.expovariate(1 / think) if think else 0

    def measure(
        self, name: str, request: Callable[[], Sample], figures: Callable[[Sample], Figures]
    ) -> Sample | None:
        """`request()`, timed; what it raises is a failed request (None)."""
        start = time.time()
        try:
            sample = request()
        except Exception as error:
            self.failed(name, start, error)
            return None
        measured = figures(sample)
        record = {"kind": self.kind, "name": name, "start": start, "end": time.time(),
                  "ok": True, "error": None, **measured.fields}  # fmt: skip
        raw_log().write(record)
        for event, ms, tokens in measured.events:
            if ms is not None:
                self._fire(event, ms, tokens, None)
        return sample

    def failed(self, name: str, start: float, error: Exception, event: str = "run") -> None:
        record = {"kind": self.kind, "name": name, "start": start, "end": time.time(),
                  "ok": False, "error": str(error)[:300]}  # fmt: skip
        raw_log().write(record)
        self._fire(event, (time.time() - start) * 1000, 0, error)

    def _fire(self, name: str, ms: float, tokens: int, error: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=self.kind, name=name, response_time=ms, response_length=tokens,
            exception=error, context={},
        )  # fmt: skip


class ModelUser(MeasuredUser):
    """Streaming chat completions straight to vLLM (or the simulator)."""

    kind = "model"
    think_setting = "model_think_seconds"

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
        messages = random.choice(self.conversations)["messages"]
        body = {"model": self.model, "messages": messages, "tools": self.tools,
                "max_tokens": SETTINGS.max_tokens}  # fmt: skip
        self.measure(f"history-{len(messages)}", lambda: timed_chat(self.client, body),
                     model_figures)  # fmt: skip

    def failed(self, name: str, start: float, error: Exception, event: str = "ttft") -> None:
        super().failed(name, start, error, event)


class AgentUser(MeasuredUser):
    """A person using the copilot: whole runs through the loop's API, each on a leave of its
    own in the state the scenario needs."""

    kind = "agent"

    def on_start(self) -> None:
        headers = {"Authorization": f"Bearer {SETTINGS.token}"}
        self.stream_client = StreamingClient(SETTINGS.loop_url, headers)
        self.control_client = StreamingClient(SETTINGS.loop_url, headers)
        self.leaves = own_leaves()

    def on_stop(self) -> None:
        self.stream_client.close()
        self.control_client.close()
        give_back(self.leaves)

    @task
    def agent_run(self) -> None:
        scenario = random.choices(AGENT_MIX, weights=[m.weight for m in AGENT_MIX])[0]
        start = time.time()
        try:
            leave = prepare(self.leaves, scenario.needs)
        except SETUP_ERRORS as error:
            self.failed(scenario.name, start, RuntimeError(f"setup: {error}"))
            return
        text = scenario.request.format(reason=leave.reason)
        first = self.measure(scenario.name, lambda: self._run(text, scenario.answer, None),
                             run_figures)  # fmt: skip
        if scenario.follow_up and first and first.session_id:
            session, follow_up = first.session_id, scenario.follow_up
            self.measure(scenario.name, lambda: self._run(follow_up, None, session), run_figures)
        put_away(self.leaves, leave, scenario.needs)

    def _run(self, text: str, answer: ConfirmAction | None, session: str | None) -> RunSample:
        s = timed_run(self.stream_client, self.control_client, text, answer, session)
        if s.status not in ("completed", "max_turns"):
            raise RuntimeError(f"run {s.status}")
        return s


class FacadeUser(MeasuredUser):
    """An OpenAI client of the copilot: streamed chat completions on the loop's facade, where
    one completion is a whole agent run and the model is the agent's name (GET /v1/models);
    each on a leave of its own, as the agent user's."""

    kind = "facade"

    def on_start(self) -> None:
        headers = {"Authorization": f"Bearer {SETTINGS.token}"}
        base = f"{SETTINGS.loop_url.rstrip('/')}/v1"
        self.client = StreamingClient(base, headers)
        # The user's own conversation, where a cancel's question is asked and answered: its
        # id lets the answer go without the history, as a front end that keeps none sends it.
        conversation = {**headers, "X-Conversation-Id": f"load-{uuid.uuid4()}"}
        self.conversation = StreamingClient(base, conversation)
        self.model = self.client.request_json("GET", "/models")["data"][0]["id"]
        self.leaves = own_leaves()

    def on_stop(self) -> None:
        self.client.close()
        self.conversation.close()
        give_back(self.leaves)

    @task
    def chat(self) -> None:
        scenario = random.choices(FACADE_MIX, weights=[m.weight for m in FACADE_MIX])[0]
        start = time.time()
        try:
            leave = prepare(self.leaves, scenario.needs)
        except SETUP_ERRORS as error:
            self.failed(scenario.name, start, RuntimeError(f"setup: {error}"))
            return
        messages = facade_messages(scenario, leave)
        self.measure(scenario.name, lambda: self._chat(messages, scenario), facade_figures)
        put_away(self.leaves, leave, scenario.needs)

    def _chat(self, messages: list[dict[str, Any]], scenario: Scenario) -> ChatSample:
        if scenario.answer is None:
            return _completed(timed_chat(self.client, {"model": self.model, "messages": messages}))
        # a cancel: the question, then the answer to it; one run across two completions, timed
        # as one (its first token is the question's, its time the two completions')
        asked = _completed(
            timed_chat(self.conversation, {"model": self.model, "messages": messages})
        )
        answer = [{"role": "user", "content": SAID[scenario.answer]}]
        done = _completed(timed_chat(self.conversation, {"model": self.model, "messages": answer}))
        return replace(
            done,
            ttft_ms=asked.ttft_ms,
            itl_ms=[*asked.itl_ms, *done.itl_ms],
            e2e_ms=asked.e2e_ms + done.e2e_ms,
            prompt_tokens=asked.prompt_tokens + done.prompt_tokens,
            output_tokens=asked.output_tokens + done.output_tokens,
        )


def _completed(s: ChatSample) -> ChatSample:
    # the facade ends a run that did not complete (failed, cancelled, turn limit) with
    # finish_reason "length" and the status as its text: not an answer
    if s.finish_reason != "stop":
        raise RuntimeError(f"run did not complete (finish_reason {s.finish_reason})")
    return s


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


@events.quitting.add_listener
def _keep_the_html_report(environment: Any, **_kwargs: Any) -> None:
    """Locust writes its HTML report on Ctrl-C and at a run's end, not on SIGTERM: the wrapper's
    last resort for a Ctrl-C Locust did not hear. Write it here when Locust has not."""
    options = getattr(environment, "parsed_options", None)
    html_file = getattr(options, "html_file", None)
    if not html_file or Path(html_file).exists() or environment.runner is None:
        return
    from locust.html import get_html_report

    Path(html_file).write_text(get_html_report(environment, show_download_link=False), "utf-8")
