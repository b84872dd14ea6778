"""Confirmations carried in a chat conversation: the MCP server's question as the assistant's
message, and the person's next message as the answer.

A run the facade starts asks its confirmations as any run that asks does (loop/runs.py): it
waits. The completion ends with the question, how to answer it, and a marker naming the run
and the confirmation; the person's next message in the same conversation answers it. The
conversation is known by the front end's conversation id (a header), else by the marker in
the last assistant message of the history it sends back. Whichever way it is found, only the
run's own user can answer it (the runs' owner check), and an answer counts only where the
person can have seen the question.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from starlette.datastructures import Headers

from common.contract import RefusalCode
from common.runs_protocol import RunReasonCode

from ..runs import ActiveRun, PendingConfirmation, RunManager

# The conversation id headers, the generic one first: Open WebUI sends its own with every
# request of a chat; LibreChat and bots can send any header their configuration names.
CONVERSATION_HEADERS = ("x-conversation-id", "x-openwebui-chat-id")
CONVERSATION_ID = re.compile(r"[\x21-\x7e]{1,200}")  # visible ASCII: a UUID, a chat's own id

# "(確認代號：run_…/cf_…)": where the question is in the history the front end sends back.
MARKER = re.compile(r"（確認代號：(run_[A-Za-z0-9_.:-]{1,36})/(cf_[0-9a-f]{12})）")
HOW_TO_ANSWER = "請回覆「確認」執行，或回覆「不要」不執行；{left}內沒有回覆就不會執行。"
ASK_AGAIN = "還在等你回覆這個確認，回覆之前不會做其他事：\n\n"
ANSWERED = "這個確認已經回覆過了，不會再執行一次。當時的結果：{answer}"
EXPIRED = (
    "這個確認已經逾時（{timeout}內沒有收到回覆），所以那個操作沒有執行。如果仍要進行，請重新提出。"
)
CANCELLED = "這個確認所屬的執行已經被取消，所以那個操作沒有執行。"
UNKNOWN = "找不到這個確認（它可能不是你的，或記錄已經不在），沒有執行任何操作。"

# Answers, read from the whole message once it is compacted (NFKC, lower case, without spaces,
# punctuation or emoji): one or more "yes" (or "no") words, then only words that add nothing
# (請, 取消, 謝謝 …). A message that mixes the two, hedges (「不確定」), or is anything else is no
# answer: the question is asked again. 「取消」 alone is no answer either: to 「確定要取消…嗎？」
# it may mean "yes, cancel it" or the Cancel button's "no"; 「確認取消」 and 「不要取消」 are.
YES_WORDS = (
    "好的?|好啊|好喔|是的?|對的?|沒錯|確認|確定|可以|同意|要|yes|y|yeah|yep|ok|okay|sure|confirm"
)
YES_TAIL = "請|麻煩|幫我|要|確認|取消|它|掉|吧|了|的|謝謝|謝啦|please|cancel|it|thanks|thankyou"
NO_WORDS = (
    "不要|不用|不必|不需要|不好|不行|不是|不對|不|別|否|算了|先不要|先不用|先不|還是不要|"
    "no|n|nope|nah|dont|donot"
)
NO_TAIL = "了|吧|啦|取消|確認|執行|保留|留著|先|好了|謝謝|謝啦|thanks|thankyou|cancel|it|please"
YES = re.compile(f"我?(?:{YES_WORDS})+(?:{YES_TAIL})*")
NO = re.compile(f"我?(?:{NO_WORDS})+(?:{NO_TAIL})*")
ANSWER_MAX_CHARS = 24  # a longer message is a request, not an answer

Answer = Literal["accept", "decline"]


def read_answer(text: str) -> Answer | None:
    """The person's answer to a yes/no question, or None when the message is not one."""
    compact = re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", text).casefold())
    if not compact or len(compact) > ANSWER_MAX_CHARS:
        return None
    if NO.fullmatch(compact):
        return "decline"
    if YES.fullmatch(compact):
        return "accept"
    return None


class BadConversationId(ValueError):
    def __init__(self, header: str) -> None:
        super().__init__(header)
        self.header = header


def conversation_id(headers: Headers) -> tuple[str, str] | None:
    """(header, id) of the conversation the request says it belongs to, if it says; raises
    BadConversationId for an id that is not visible ASCII of at most 200 characters."""
    for name in CONVERSATION_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        if not CONVERSATION_ID.fullmatch(value):
            raise BadConversationId(name)
        return name, value
    return None


def session_of(conversation: str) -> str:
    """The loop session that holds a conversation's runs (a session id's own shape and length,
    whatever the front end's id looks like)."""
    return "chat-" + hashlib.sha256(conversation.encode()).hexdigest()[:40]


def question_text(run_id: str, pending: PendingConfirmation, timeout: float) -> str:
    """The assistant's message that asks: what will happen (the MCP server's question names
    the leave, its dates and the days returned), how to answer, and the marker."""
    left = max(pending.asked_at + timeout - time.time(), 0)
    how = HOW_TO_ANSWER.format(left=duration(left))
    return f"{pending.message}\n\n{how}\n（確認代號：{run_id}/{pending.id}）"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} 秒"
    return f"{seconds / 60:.0f} 分鐘"


def marker_of(history: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(run id, confirmation id) of the question the last assistant message asked, if it
    asked one."""
    said = [m["content"] for m in history if m["role"] == "assistant"]
    found = MARKER.search(said[-1]) if said else None
    return (found.group(1), found.group(2)) if found else None


def without_marker(text: str) -> str:
    """An assistant message as the model is given it in a history: without the marker, which
    means nothing to it."""
    return MARKER.sub("", text).rstrip()


@dataclass(frozen=True)
class Waiting:
    run: ActiveRun
    pending: PendingConfirmation


def waiting_by_marker(manager: RunManager, user_key: str, run_id: str, cid: str) -> Waiting | None:
    """The confirmation the marker names, if it still waits and is this user's."""
    run = manager.active.get(run_id)
    pending = run.confirmations.get(cid) if run and run.user_key == user_key else None
    if run is None or pending is None or pending.answer.done():
        return None
    return Waiting(run, pending)


def waiting_in_session(manager: RunManager, user_key: str, session_id: str) -> Waiting | None:
    """The first confirmation still waiting in this user's conversation."""
    for run in manager.active.values():
        if run.user_key == user_key and run.session_id == session_id:
            first = first_waiting(run)
            if first is not None:
                return Waiting(run, first)
    return None


def first_waiting(run: ActiveRun) -> PendingConfirmation | None:
    return next((p for p in run.confirmations.values() if not p.answer.done()), None)


class StillRunning(Exception):
    """The answered confirmation's run goes on (or waits on another loop): a second answer is
    refused, its run is not to be read twice."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def settled_text(
    manager: RunManager, user_key: str, run_id: str, cid: str, waits: float
) -> str | Waiting:
    """What to tell a person who answers a question that no longer waits: that it expired,
    or was answered already and with what result; or (Waiting) another question of the same
    run that does wait. Raises StillRunning when the run still goes on without a question."""
    run = manager.active.get(run_id)
    if run is not None and run.user_key == user_key:
        pending = run.confirmations.get(cid)
        if pending is not None and pending.answer.result().action == "cancel":
            # answered "cancel" by the loop: the run was cancelled, or the time ran out
            return CANCELLED if run.cancelling else EXPIRED.format(timeout=duration(waits))
        other = first_waiting(run)
        if other is not None:
            return Waiting(run, other)
        raise StillRunning("this confirmation was already answered; its run is still going", 409)
    record = await manager.record(run_id, user_key)
    if record is None:
        return UNKNOWN
    if record.status == "running":
        raise StillRunning(
            "the run waiting for this confirmation is held by another loop instance; the "
            "site must send a conversation to one loop (client affinity)",
            503,
        )
    reason = record.reason
    if reason is not None and reason.code == RunReasonCode.CANCELLED:
        # cancelled by its person (no detail), or a question that expired after a restart
        return CANCELLED if reason.detail is None else EXPIRED.format(timeout=duration(waits))
    # The loop answers "cancel" to the MCP server when nobody answered in time.
    if any(s.refusal() == RefusalCode.CONFIRMATION_CANCELLED for s in record.tool_steps()):
        return EXPIRED.format(timeout=duration(waits))
    return ANSWERED.format(answer=record.answer or record.status)
