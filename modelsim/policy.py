"""The scripted leave-copilot: what the fine-tuned model would do, decided from the transcript.

Deterministic for a given conversation. It reads the latest user request, the tool calls and
results since then, and the tools the request offers, and returns either tool calls or text.
It never calls a tool the request does not offer, never calls the same tool with the same
arguments twice in one turn, and answers in text after a tool error instead of looping.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.chat import content_text
from common.contract import (
    LEAVE_TYPE_BY_NAME,
    LEAVE_TYPES,
    NEXT_STATUSES,
    TOOL_ERROR_PREFIX,
    LeaveStatus,
    ToolName,
)

LEAVE_ID = re.compile(r"LV-[0-9a-f]{6}")
# `[sim-fault:<mode>,…]` in a user message asks for faults (for agents that forward no headers)
FAULT_TAG = re.compile(r"\[sim-fault:([a-z0-9_,]+)\]")
# The dates a request names, as a person writes them: 2026-12-28, 2026/12/28, 12月28日, 12/28,
# 今天/明天/後天, 下週一 (also 下周, 下禮拜, 下星期; 下下週 the week after; 這週/本週 this one),
# next monday. Read against the simulator's own today, as a model told the date would.
DATE_WORDS = re.compile(
    r"(?P<iso>\d{4})[-/](?P<im>\d{1,2})[-/](?P<id>\d{1,2})"
    r"|(?P<mm>\d{1,2})月(?P<md>\d{1,2})[日號]?"
    r"|(?<![\d/])(?P<sm>\d{1,2})/(?P<sd>\d{1,2})(?![\d/])"
    r"|(?P<day>今天|明天|後天)"
    r"|(?P<week>下下|下|這|本)(?:週|周|禮拜|星期)(?P<wd>[一二三四五六日天])"
    r"|(?P<next>next|this) (?P<ewd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)",
    re.IGNORECASE,
)
WEEKDAY_ZH = "一二三四五六日"
WEEKDAY_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEK_OFFSET = {"這": 0, "本": 0, "this": 0, "下": 1, "next": 1, "下下": 2}

# intent -> trigger words (checked in this order; the first match wins)
INTENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cancel", ("取消", "撤銷", "cancel", "withdraw")),
    ("reject", ("駁回", "退回", "reject", "deny")),
    ("approve", ("核准", "批准", "同意", "approve")),
    ("submit", ("送出", "送審", "提交", "遞交", "submit")),
    (
        "balance",
        (
            "剩幾天",
            "剩下幾天",
            "還有幾天",
            "還剩",
            "剩多少",
            "餘額",
            "額度",
            "剩餘",
            "balance",
            "how many days",
        ),
    ),
    ("create", ("幫我請", "我要請", "申請", "新增", "請假", "create", "request a leave", "book")),
    (
        "query",
        (
            "查",
            "有哪些",
            "列出",
            "看看",
            "狀態",
            "哪幾張",
            "search",
            "show",
            "list",
            "status",
            "find",
            "check",
        ),
    ),
)
# A status a query filters by, as a person names it ("列出我已核准的假"); read only when the
# request also asks to look (QUERY_FIRST), so 「核准…」 or 「改成已取消」 still ask for a change.
STATUS_FILTERS = (
    ("已核准", LeaveStatus.APPROVED),
    ("審核中", LeaveStatus.SUBMITTED),
    ("送審中", LeaveStatus.SUBMITTED),
    ("草稿", LeaveStatus.DRAFT),
    ("被駁回", LeaveStatus.REJECTED),
    ("已駁回", LeaveStatus.REJECTED),
    ("已取消", LeaveStatus.CANCELLED),
)
QUERY_FIRST = ("列出", "查", "有哪些", "哪幾張", "哪些", "list", "show", "check", "看看")
# Words that never name a leave: a phrase is split at them, wherever they are.
SPLIT_AT = re.compile(r"那張|這張|那筆|這筆|幫我|麻煩|一下")
# Words that say how, not which: stripped from the start or the end of each phrase (never
# from the middle, so 「健康檢查」 keeps its 查) before the rest becomes the search keyword.
LEADING = (
    "查一下",
    "查詢",
    "查看",
    "查",
    "幫我",
    "麻煩",
    "請",
    "把",
    "我的",
    "我",
    "取消",
    "撤銷",
    "核准",
    "批准",
    "同意",
    "駁回",
    "退回",
    "送出",
    "提交",
    "列出",
    "看看",
    "那張",
    "這張",
    "那筆",
    "這筆",
    "全部",
    "所有",
    "一下",
    "也",
    "將",
    "假單",
)
TRAILING = (
    "送出審核",
    "送出",
    "送審",
    "審核",
    "提交",
    "的假單",
    "假單",
    "的假",
    "假",
    "那張",
    "這張",
    "已核准",
    "一下",
    "有哪些",
    "吧",
    "嗎",
    "呢",
    "了",
    "也",
)
ENGLISH_FILLER = {
    "please",
    "submit",
    "my",
    "the",
    "a",
    "an",
    "leave",
    "leaves",
    "request",
    "for",
    "approve",
    "reject",
    "cancel",
    "show",
    "list",
    "find",
    "search",
    "status",
    "of",
    "me",
    "all",
    "it",
    "too",
    "that",
    "this",
    "can",
    "you",
    "what",
    "is",
    "are",
    "i",
    "to",
    "and",
    "withdraw",
    "check",
    "book",
}
# "那張" is not here: 「把我那張家庭旅遊的特休…」 names its leave and must be searched.
REFERS_BACK = ("剛剛", "剛才", "上一張", "同一張", "也送", "it too", "that one", "same one")
DECLINE_MARKERS = ("拒絕", "沒有完成確認", "declined", "did not complete")
# The status update_leave_status is asked for, by intent.
INTENT_STATUS = {
    "submit": LeaveStatus.SUBMITTED,
    "approve": LeaveStatus.APPROVED,
    "reject": LeaveStatus.REJECTED,
}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


@dataclass
class Turn:
    """The conversation as the policy needs it."""

    request: str
    english: bool
    history_text: str  # everything before the latest user message
    calls: list[ToolCall]  # assistant tool calls since the latest user message, in order
    results: list[str]  # their tool results, in order
    offered: set[str]


def read_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Turn:
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    request = content_text(messages[last_user].get("content")) if last_user >= 0 else ""
    request = FAULT_TAG.sub("", request).strip()
    history = " ".join(content_text(m.get("content")) for m in messages[: max(last_user, 0)])
    calls: list[ToolCall] = []
    results: list[str] = []
    for message in messages[last_user + 1 :]:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except (TypeError, ValueError):
                    arguments = {}
                calls.append(ToolCall(str(function.get("name")), arguments))
        elif message.get("role") == "tool":
            results.append(content_text(message.get("content")))
    offered = {t.get("function", {}).get("name") for t in tools or [] if isinstance(t, dict)} - {
        None
    }
    ascii_letters = sum(ch.isascii() and ch.isalpha() for ch in request)
    english = ascii_letters > 0 and not re.search(r"[\u4e00-\u9fff]", request)
    return Turn(request, english, history, calls, results, offered)


def decide(turn: Turn) -> Decision:
    say = _English() if turn.english else _Chinese()
    try:
        return _decide(turn, say)
    except (KeyError, TypeError, AttributeError, ValueError):
        # A tool result not shaped as the leave tools answer (a list, a leave without its
        # fields): a model answers something, it never fails the request.
        return Decision(text=say.unreadable())


def _decide(turn: Turn, say: _Voice) -> Decision:
    intent = detect_intent(turn.request)
    if intent is None:
        return Decision(text=say.unknown())

    last = turn.results[-1] if turn.results else None
    if last is not None and _is_error(last):
        message = _error_text(last)
        previous_call = turn.calls[-1] if turn.calls else None
        if (
            previous_call
            and previous_call.name == ToolName.CANCEL_APPROVED_LEAVE
            and any(m in message for m in DECLINE_MARKERS)
        ):
            return Decision(text=say.kept(str(previous_call.arguments.get("leave_id", ""))))
        return Decision(text=say.error(message))

    if intent == "balance":
        if not turn.results:
            return _call(turn, say, ToolName.GET_LEAVE_BALANCE, {})
        return Decision(text=say.balance(_json(last)))

    if intent == "create":
        return _create(turn, say, last)

    if not turn.calls:  # first step of every other intent: find the real ID
        remembered = _referred_leave(turn)
        if remembered and intent in ("submit", "approve", "reject", "cancel"):
            return _act(turn, say, intent, remembered)
        status, rest = status_filter(turn.request)
        if status is not None:
            return _call(turn, say, ToolName.SEARCH_LEAVES,
                         {"keyword": extract_keyword(rest), "status": status})  # fmt: skip
        keyword = extract_keyword(turn.request)
        return _call(turn, say, ToolName.SEARCH_LEAVES, {"keyword": keyword})

    # In a batch (search + balance together) the search carries the decision.
    primary = max(
        range(len(turn.calls)),
        key=lambda i: (turn.calls[i].name != ToolName.GET_LEAVE_BALANCE, i),
    )
    previous = turn.calls[primary].name
    last = turn.results[primary] if primary < len(turn.results) else last
    data = _json(last)
    if previous == ToolName.SEARCH_LEAVES:
        leaves = (data or {}).get("leaves", [])
        keyword = turn.calls[primary].arguments.get("keyword", "")
        if not leaves:
            return Decision(text=say.nothing_found(keyword))
        if intent == "query":
            return Decision(text=say.summary(leaves))
        target = _pick(leaves, intent)
        if target is None:
            return Decision(text=say.not_eligible(leaves[0], intent))
        return _act(turn, say, intent, target["leave_id"])
    if previous == ToolName.UPDATE_LEAVE_STATUS and data:
        return Decision(text=say.updated(data))
    if previous == ToolName.CANCEL_APPROVED_LEAVE:
        return Decision(text=say.cancelled(data) if data else say.error(last or ""))
    return Decision(text=say.done(last or ""))


def detect_intent(request: str, today: dt.date | None = None) -> str | None:
    status, rest = status_filter(request)
    if status is not None:
        return "query"
    lowered = rest.casefold()
    for intent, words in INTENTS:
        if any(w in lowered for w in words):
            return intent
    if leave_type_named(request) or "假" in request:
        # dates and a leave type, with no verb it knows (「幫我清下周四的事假」): a new leave
        return "create" if find_dates(request, today) else "query"
    return None


def status_filter(request: str) -> tuple[str | None, str]:
    """The status a query names, and the request without it; (None, request) when none."""
    lowered = request.casefold()
    if not any(word in lowered for word in QUERY_FIRST):
        return None, request
    for words, status in STATUS_FILTERS:
        if words in request:
            return status, request.replace(words, "")
    return None, request


def leave_type_named(request: str) -> str | None:
    """The leave type a request names, by its name or an alias (sick, comp, 年假…)."""
    lowered = request.casefold()
    named = [(lowered.find(name), of) for name, of in LEAVE_TYPE_BY_NAME.items() if name in lowered]
    return min(named)[1] if named else None


def find_dates(request: str, today: dt.date | None = None) -> list[dt.date]:
    """The dates `request` names, in the order it names them (see DATE_WORDS)."""
    today = today or dt.date.today()
    found: list[dt.date] = []
    for m in DATE_WORDS.finditer(request):
        try:
            if m["iso"]:
                found.append(dt.date(int(m["iso"]), int(m["im"]), int(m["id"])))
            elif m["mm"] or m["sm"]:
                month, day = int(m["mm"] or m["sm"]), int(m["md"] or m["sd"])
                this_year = dt.date(today.year, month, day)
                # a date with no year is the next one of that name
                found.append(this_year if this_year >= today else this_year.replace(today.year + 1))
            elif m["day"]:
                found.append(today + dt.timedelta(days=("今天", "明天", "後天").index(m["day"])))
            else:
                week = WEEK_OFFSET[(m["week"] or m["next"]).lower()]
                weekday = (
                    WEEKDAY_ZH.index("日" if m["wd"] == "天" else m["wd"])
                    if m["wd"]
                    else WEEKDAY_EN.index(m["ewd"].lower())
                )
                monday = today - dt.timedelta(days=today.weekday())
                found.append(monday + dt.timedelta(weeks=week, days=weekday))
        except ValueError:  # 2月30日: not a date
            continue
    return found


def extract_keyword(request: str) -> str:
    if re.search(r"[\u4e00-\u9fff]", request):
        parts = re.split(r"[的，。！？、,.!?\s]+", SPLIT_AT.sub(" ", request))
        phrases = [_strip_fillers(p) for p in parts if p.casefold() not in ENGLISH_FILLER]
        phrases = [p for p in phrases if p]
        reasons = [p for p in phrases if p not in LEAVE_TYPES]
        # the reason words, if any; else the leave type, if named
        for candidates in (reasons, phrases):
            if candidates:
                best = max(candidates, key=len)
                for leave_type in LEAVE_TYPES:  # "加班補休" → "加班" also matches its reason
                    if best != leave_type and best.endswith(leave_type):
                        best = best[: -len(leave_type)]
                return best
        return ""
    words = [w for w in re.findall(r"[A-Za-z0-9-]+", request.casefold()) if w not in ENGLISH_FILLER]
    return " ".join(words)


def _strip_fillers(phrase: str) -> str:
    changed = True
    while changed and phrase:
        changed = False
        for word in LEADING:
            if phrase.startswith(word):
                phrase, changed = phrase[len(word) :], True
        for word in TRAILING:
            if phrase.endswith(word):
                phrase, changed = phrase[: -len(word)], True
    return phrase


# -- steps ---------------------------------------------------------------------------------


def _call(turn: Turn, say: _Voice, name: str, arguments: dict[str, Any]) -> Decision:
    if name not in turn.offered:
        return Decision(text=say.no_tool(name))
    if ToolCall(name, arguments) in turn.calls:  # never loop on the same call
        return Decision(text=say.done(turn.results[-1] if turn.results else ""))
    return Decision(tool_calls=(ToolCall(name, arguments),))


def _act(turn: Turn, say: _Voice, intent: str, leave_id: str) -> Decision:
    if intent == "cancel":
        return _call(turn, say, ToolName.CANCEL_APPROVED_LEAVE, {"leave_id": leave_id})
    arguments = {"leave_id": leave_id, "status": INTENT_STATUS[intent]}
    return _call(turn, say, ToolName.UPDATE_LEAVE_STATUS, arguments)


def _create(turn: Turn, say: _Voice, last: str | None) -> Decision:
    if turn.calls:
        data = _json(last)
        return Decision(text=say.created(data) if data else say.done(last or ""))
    dates = find_dates(turn.request)
    if not dates:
        return Decision(text=say.need_dates())
    leave_type = leave_type_named(turn.request) or "特休"
    reason_match = re.search(r"(?:事由|原因|reason)[:：\s]*(.+)$", turn.request, re.IGNORECASE)
    reason = reason_match.group(1).strip() if reason_match else extract_keyword(turn.request)
    arguments = {
        "leave_type": leave_type,
        "start_date": dates[0].isoformat(),
        "end_date": dates[-1].isoformat(),
        "reason": reason or leave_type,
    }
    return _call(turn, say, ToolName.CREATE_LEAVE, arguments)


def _pick(leaves: list[dict[str, Any]], intent: str) -> dict[str, Any] | None:
    wanted = INTENT_STATUS.get(intent)
    for leave in leaves:
        if wanted and wanted in leave.get("next_steps", []):
            return leave
        if intent == "cancel" and leave.get("status") == LeaveStatus.APPROVED:
            return leave
    if wanted:  # none the caller may move there: one that could go, and the server says who may
        return next(
            (v for v in leaves if wanted in NEXT_STATUSES.get(str(v.get("status")), ())), None
        )
    return None


def _referred_leave(turn: Turn) -> str | None:
    """A follow-up like 「剛剛那張也送出」 means the leave last named in the conversation."""
    if not any(word in turn.request.casefold() for word in REFERS_BACK):
        return None
    ids = LEAVE_ID.findall(turn.history_text)
    return ids[-1] if ids else None


def _is_error(result: str) -> bool:
    if result.startswith(TOOL_ERROR_PREFIX):
        return True
    data = _json(result)
    return isinstance(data, dict) and "error" in data and "leaves" not in data


def _error_text(result: str) -> str:
    text = result.removeprefix(TOOL_ERROR_PREFIX).strip()
    data = _json(text)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", text))
    return text


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


# -- what it says --------------------------------------------------------------------------


class _Voice(Protocol):
    def unknown(self) -> str: ...
    def unreadable(self) -> str: ...
    def error(self, message: str) -> str: ...
    def balance(self, data: Any) -> str: ...
    def nothing_found(self, keyword: str) -> str: ...
    def summary(self, leaves: list[dict[str, Any]]) -> str: ...
    def not_eligible(self, leave: dict[str, Any], intent: str) -> str: ...
    def updated(self, data: dict[str, Any]) -> str: ...
    def cancelled(self, data: dict[str, Any]) -> str: ...
    def kept(self, leave_id: str) -> str: ...
    def created(self, data: dict[str, Any]) -> str: ...
    def need_dates(self) -> str: ...
    def no_tool(self, name: str) -> str: ...
    def done(self, result: str) -> str: ...


STATUS_ZH = {
    LeaveStatus.DRAFT: "草稿",
    LeaveStatus.SUBMITTED: "審核中",
    LeaveStatus.APPROVED: "已核准",
    LeaveStatus.REJECTED: "已駁回",
    LeaveStatus.CANCELLED: "已取消",
}
VERB_ZH = {
    LeaveStatus.SUBMITTED: "送出審核",
    LeaveStatus.APPROVED: "核准",
    LeaveStatus.REJECTED: "駁回",
}
VERB_EN = {
    LeaveStatus.SUBMITTED: "submitted for approval",
    LeaveStatus.APPROVED: "approved",
    LeaveStatus.REJECTED: "rejected",
}


class _Chinese(_Voice):
    def unknown(self) -> str:
        return "抱歉，我是差勤助手，只能協助查詢、申請、送審、核准或取消假單，以及查詢假期餘額。"

    def unreadable(self) -> str:
        return "我讀不懂工具回傳的內容，請查詢假單確認目前的狀態。"

    def error(self, message: str) -> str:
        return f"這個操作沒有完成：{message}"

    def balance(self, data: Any) -> str:
        lines = (data or {}).get("balances", [])
        parts = [f"{b['leave_type']} {b['remaining_days']:g} 天" for b in lines]
        return "你目前的假期餘額：" + "、".join(parts) + "。"

    def nothing_found(self, keyword: str) -> str:
        return f"找不到符合「{keyword}」的假單，請確認關鍵字或日期。"

    def summary(self, leaves: list[dict[str, Any]]) -> str:
        items = [
            f"{v['leave_id']}（{v['leave_type']}，{v['start_date']}～{v['end_date']}，"
            f"{v['days']:g} 天，{STATUS_ZH.get(v['status'], v['status'])}，事由：{v['reason']}）"
            for v in leaves
        ]
        return f"找到 {len(leaves)} 張假單：" + "；".join(items) + "。"

    def not_eligible(self, leave: dict[str, Any], intent: str) -> str:
        status = STATUS_ZH.get(leave["status"], leave["status"])
        return f"假單 {leave['leave_id']} 目前是{status}，無法執行這個操作。"

    def updated(self, data: dict[str, Any]) -> str:
        verb = VERB_ZH.get(data.get("to_status", ""), data.get("to_status", ""))
        return f"已將 {data['leave_id']} {verb}。"

    def cancelled(self, data: dict[str, Any]) -> str:
        return f"已取消假單 {data['leave_id']}，{data.get('restored_days', 0):g} 天已退回假期額度。"

    def kept(self, leave_id: str) -> str:
        return f"你沒有確認取消，假單 {leave_id} 維持已核准，沒有任何變更。"

    def created(self, data: dict[str, Any]) -> str:
        return (
            f"已建立草稿假單 {data['leave_id']}（{data['leave_type']}，{data['start_date']}～"
            f"{data['end_date']}），需要送出審核時請告訴我。"
        )

    def need_dates(self) -> str:
        return "請告訴我請假的起訖日期（YYYY-MM-DD）與假別、事由。"

    def no_tool(self, name: str) -> str:
        return f"目前無法使用 {name} 工具，所以沒辦法完成這個操作。"

    def done(self, result: str) -> str:
        return "已完成。" if result else "好的。"


class _English(_Voice):
    def unknown(self) -> str:
        return (
            "Sorry, I am the leave assistant: I can search, create, submit, approve or cancel "
            "leave requests and check your balance."
        )

    def unreadable(self) -> str:
        return "I could not read the tool's answer; please check the leave's current status."

    def error(self, message: str) -> str:
        return f"That did not go through: {message}"

    def balance(self, data: Any) -> str:
        lines = (data or {}).get("balances", [])
        return "Your balance: " + ", ".join(
            f"{b['leave_type']} {b['remaining_days']:g} days" for b in lines
        )

    def nothing_found(self, keyword: str) -> str:
        return f"No leave matches '{keyword}'."

    def summary(self, leaves: list[dict[str, Any]]) -> str:
        return f"Found {len(leaves)} leave(s): " + "; ".join(
            f"{v['leave_id']} ({v['leave_type']}, {v['start_date']} to {v['end_date']}, "
            f"{v['status']})"
            for v in leaves
        )

    def not_eligible(self, leave: dict[str, Any], intent: str) -> str:
        return f"Leave {leave['leave_id']} is {leave['status']}; I cannot do that."

    def updated(self, data: dict[str, Any]) -> str:
        return (
            f"Leave {data['leave_id']} is now {VERB_EN.get(data['to_status'], data['to_status'])}."
        )

    def cancelled(self, data: dict[str, Any]) -> str:
        days = data.get("restored_days", 0)
        return f"Leave {data['leave_id']} is cancelled; {days:g} days restored."

    def kept(self, leave_id: str) -> str:
        return f"You did not confirm, so leave {leave_id} stays approved; nothing changed."

    def created(self, data: dict[str, Any]) -> str:
        return (
            f"Created draft leave {data['leave_id']} ({data['start_date']} to {data['end_date']})."
        )

    def need_dates(self) -> str:
        return "Which dates (YYYY-MM-DD), leave type and reason?"

    def no_tool(self, name: str) -> str:
        return f"The {name} tool is not available, so I cannot do that."

    def done(self, result: str) -> str:
        return "Done."


def requested_faults(messages: list[dict[str, Any]]) -> str:
    """Fault modes named by a `[sim-fault:…]` tag in the latest user message, comma-joined."""
    for message in reversed(messages):
        if message.get("role") == "user":
            match = FAULT_TAG.search(content_text(message.get("content")))
            return match.group(1) if match else ""
    return ""
