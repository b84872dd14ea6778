"""The OpenAI parameters chat front ends send, and what the facade does with each: honoured,
mapped to what the loop can do, ignored (with a `Warning` header when the value asked for
something), or refused because honouring it is impossible and ignoring it would change the
answer the caller relies on (docs/loop.md has the table)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..settings import LoopSettings

# Why a parameter is ignored (the text of its warning; ASCII, as every header value).
SAMPLING = (
    "ignored: the agent samples with the loop's own settings (LOOP_TEMPERATURE), the ones "
    "its tool calls were evaluated with, the same for every person"
)
LENGTH = (
    "ignored: one answer is several model calls and tool results, each call bounded by "
    "LOOP_MAX_TOKENS; cutting one short would cut a tool call"
)
OWN_TOOLS = (
    "ignored: the agent acts only with the leave MCP server's tools; the front end's tools "
    "are not offered to the model and never called"
)
REASONING = "ignored: the model has no reasoning effort to set"
TASK_LENGTH = "lowered to LOOP_TASK_MAX_TOKENS"


@dataclass(frozen=True)
class Parameter:
    accepts: str  # what a valid value is: the 400's message for any other
    why: str | None = None  # the warning when it is ignored; None: honoured or mapped
    # values that ask for nothing the loop does not do anyway: ignored without a warning
    quiet: Callable[[Any, LoopSettings], bool] = lambda value, _settings: value is None


def _none_or(*defaults: Any) -> Callable[[Any, LoopSettings], bool]:
    return lambda value, _settings: value is None or value in defaults


def _loops_temperature(value: Any, settings: LoopSettings) -> bool:
    return value is None or value == settings.temperature


ANY = "any value (it is ignored)"
# Every parameter the facade takes beside `model`, `messages` and `stream`, by name.
PARAMETERS: dict[str, Parameter] = {
    "n": Parameter(
        "1 or null; more is not supported: one run gives one choice, and a second run could "
        "repeat a change to a leave"
    ),
    "stream_options": Parameter("an object or null; include_usage is honoured"),
    "user": Parameter("a string or null; the bearer token says who calls"),
    "metadata": Parameter("an object or null (it is ignored)"),
    "temperature": Parameter("a number from 0 to 2, or null", SAMPLING, _loops_temperature),
    "top_p": Parameter("a number from 0 to 1, or null", SAMPLING, _none_or(1)),
    "top_k": Parameter("an integer or null", SAMPLING, _none_or(-1, 0)),
    "min_p": Parameter("a number from 0 to 1, or null", SAMPLING, _none_or(0)),
    "repetition_penalty": Parameter("a number above 0, or null", SAMPLING, _none_or(1)),
    "presence_penalty": Parameter("a number from -2 to 2, or null", SAMPLING, _none_or(0)),
    "frequency_penalty": Parameter("a number from -2 to 2, or null", SAMPLING, _none_or(0)),
    "seed": Parameter("an integer or null", SAMPLING),
    "logit_bias": Parameter("an object of numbers, or null", SAMPLING, _none_or({})),
    "max_tokens": Parameter("an integer of at least 1, or null", LENGTH),
    "max_completion_tokens": Parameter("an integer of at least 1, or null", LENGTH),
    "stop": Parameter("a string, a list of at most 4 strings, or null"),
    "logprobs": Parameter(
        "false or null; true is not supported: the answer is made of several model calls and "
        "tool results, with no log probabilities to give"
    ),
    "top_logprobs": Parameter(
        "0 or null; more is not supported: there are no log probabilities to give"
    ),
    "response_format": Parameter(
        '{"type": "text"} or null; other formats are not supported: the answer is the '
        "agent's reply to a person, never JSON made to a schema"
    ),
    "tools": Parameter("a list or null", OWN_TOOLS, _none_or([])),
    "functions": Parameter("a list or null", OWN_TOOLS, _none_or([])),
    "tool_choice": Parameter(ANY, OWN_TOOLS, _none_or("none", "auto")),
    "function_call": Parameter(ANY, OWN_TOOLS, _none_or("none", "auto")),
    "parallel_tool_calls": Parameter("true, false or null (it is ignored)"),
    "reasoning_effort": Parameter("a string or null", REASONING),
}


def ignored(values: dict[str, Any], settings: LoopSettings) -> dict[str, str]:
    """The parameters given whose values ask for something the facade does not do, each with
    why it is ignored, in the table's order."""
    return {
        name: parameter.why
        for name, parameter in PARAMETERS.items()
        if parameter.why is not None and not parameter.quiet(values.get(name), settings)
    }


def task_max_tokens(values: dict[str, Any], settings: LoopSettings) -> tuple[int, bool]:
    """(max_tokens of a housekeeping request's model call, whether the request asked for
    more): the smaller of what it asks for and LOOP_TASK_MAX_TOKENS."""
    asked = values.get("max_completion_tokens") or values.get("max_tokens")
    if asked is None:
        return settings.task_max_tokens, False
    return min(asked, settings.task_max_tokens), asked > settings.task_max_tokens


def warning_headers(notes: dict[str, str]) -> dict[str, str]:
    """`Warning: 299 - "…"` (RFC 7234's persistent warning), one per reason, naming the
    parameters; RFC 9111 has since retired the header, so the names alone also go in
    `X-Leave-Ignored-Parameters`, for scripts."""
    if not notes:
        return {}
    by_reason: dict[str, list[str]] = {}
    for name, why in notes.items():
        by_reason.setdefault(why, []).append(name)
    warnings = [f'299 - "{", ".join(names)} {why}"' for why, names in by_reason.items()]
    return {"Warning": ", ".join(warnings), "X-Leave-Ignored-Parameters": ", ".join(notes)}


class StopCut:
    """`stop`, mapped: the model's text up to (never including) the first stop string, as
    OpenAI's own stop sequences end it. Fed the text as it streams, it holds back what could
    still be the start of a stop string."""

    def __init__(self, stop: str | list[str] | None) -> None:
        self.stops = [s for s in ([stop] if isinstance(stop, str) else stop or []) if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """What of the text so far can be sent now."""
        if self.stopped or not self.stops:
            return "" if self.stopped else text
        self.pending += text
        cuts = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if cuts:
            self.stopped = True
            return self.pending[: min(cuts)]
        ready = len(self.pending) - self.hold
        if ready <= 0:
            return ""
        sent, self.pending = self.pending[:ready], self.pending[ready:]
        return sent

    def finish(self) -> str:
        """The rest, at the end of the text."""
        rest, self.pending = ("" if self.stopped else self.pending), ""
        return rest
