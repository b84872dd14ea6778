"""The agent and facade users' scenarios: the seed scenarios (devtools.demo.SCENARIOS), each on a
leave of the user's own, named by its reason where the seed names 家庭旅遊 and 表妹婚禮 (a test
holds the requests to the seed's words)."""

from __future__ import annotations

from dataclasses import dataclass

from common.runs_protocol import ConfirmAction
from common.scenarios import CANCEL as CANCEL
from common.scenarios import CANCEL_ACCEPTED, CANCEL_DECLINED
from common.scenarios import FOLLOW_UP as FOLLOW_UP
from common.scenarios import QUERY as QUERY
from common.scenarios import SUBMIT as SUBMIT

from .leaves import Leave


@dataclass(frozen=True)
class Scenario:
    name: str
    weight: int
    needs: str  # "draft" (new), "approved" (new) or "kept" (the user's approved leave)
    request: str
    answer: ConfirmAction | None = None  # how a confirmation is answered
    follow_up: str | None = None  # a second request in the same session


# The seed scenarios, queries most often.
AGENT_MIX = (
    Scenario("submit", 1, "draft", SUBMIT),
    Scenario("query", 3, "kept", QUERY),
    Scenario(CANCEL_DECLINED.name, 1, "kept", CANCEL, CANCEL_DECLINED.answer),
    Scenario(CANCEL_ACCEPTED.name, 1, "approved", CANCEL, CANCEL_ACCEPTED.answer),
    Scenario("session-follow-up", 1, "draft", QUERY, follow_up=FOLLOW_UP),
)


def facade_messages(scenario: Scenario, leave: Leave) -> list[dict[str, str]]:
    """The scenario as a chat client sends it; a follow-up carries its history, with the
    answer that named the leave, as the facade keeps no session."""
    first = {"role": "user", "content": scenario.request.format(reason=leave.reason)}
    if not scenario.follow_up:
        return [first]
    answer = f"找到 1 張假單：{leave.leave_id}（特休，草稿，事由：{leave.reason}）。"
    return [
        first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": scenario.follow_up},
    ]


# The facade asks a confirmation in the conversation: a cancel is two completions, the
# question and then the answer, in the person's words.
FACADE_MIX = (
    Scenario("submit", 1, "draft", SUBMIT),
    Scenario("query", 3, "kept", QUERY),
    Scenario(CANCEL_DECLINED.name, 1, "kept", CANCEL, CANCEL_DECLINED.answer),
    Scenario(CANCEL_ACCEPTED.name, 1, "approved", CANCEL, CANCEL_ACCEPTED.answer),
    Scenario("history-follow-up", 1, "draft", QUERY, follow_up=FOLLOW_UP),
)
# How a person answers the facade's question (loop/api/facade_confirm.py reads these words).
SAID: dict[ConfirmAction, str] = {"accept": "確認", "decline": "不要", "cancel": "不要"}
