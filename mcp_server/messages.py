"""What the tools say when they refuse: text a model can act on, in zh-TW (default) or English.

Every refusal has a stable `code` (machine-readable, never translated) and a `rule` (the metric
label: which business rule refused).
"""

from __future__ import annotations

from typing import Any

from common.contract import LeaveStatus, RefusalCode

STATUS_NAMES: dict[str, dict[str, str]] = {
    "zh-TW": {
        LeaveStatus.DRAFT: "draft（草稿）",
        LeaveStatus.SUBMITTED: "submitted（已送出審核）",
        LeaveStatus.APPROVED: "approved（已核准）",
        LeaveStatus.REJECTED: "rejected（已駁回）",
        LeaveStatus.CANCELLED: "cancelled（已取消）",
    },
    "en": {status: status.value for status in LeaveStatus},
}

# code -> (rule, {language: template})
TEMPLATES: dict[RefusalCode, tuple[str, dict[str, str]]] = {
    RefusalCode.UNKNOWN_LEAVE_ID: (
        "unknown_id",
        {
            "zh-TW": "找不到假單 {leave_id}。請先呼叫 search_leaves 查詢，取得真實的假單 ID 後再操作，"
            "不要猜測 ID。",
            "en": "No leave {leave_id} was found. Call search_leaves first to get the real leave "
            "ID; never guess an ID.",
        },
    ),
    RefusalCode.WRONG_STEP: (
        "wrong_step",
        {
            "zh-TW": "假單 {leave_id} 目前是 {current}，不能直接改為 {requested}。假單狀態只能逐級推進，"
            "目前允許的下一步：{allowed}。",
            "en": "Leave {leave_id} is {current}; it cannot go to {requested}. Status moves one "
            "step at a time; the allowed next step is: {allowed}.",
        },
    ),
    RefusalCode.USE_CANCEL_TOOL: (
        "wrong_step",
        {
            "zh-TW": "假單 {leave_id} 目前是 {current}。已核准的假單只能由申請人透過 "
            "cancel_approved_leave 並經使用者確認後取消，update_leave_status 不能取消或退回它。",
            "en": "Leave {leave_id} is {current}. An approved leave can only be cancelled by its "
            "owner with cancel_approved_leave after the user confirms; update_leave_status "
            "cannot cancel or revert it.",
        },
    ),
    RefusalCode.NOT_CANCELLABLE: (
        "wrong_step",
        {
            "zh-TW": "假單 {leave_id} 目前是 {current}，cancel_approved_leave 只能取消已核准（approved）"
            "的假單。",
            "en": "Leave {leave_id} is {current}; cancel_approved_leave only cancels approved "
            "leaves.",
        },
    ),
    RefusalCode.FORBIDDEN: (
        "forbidden",
        {
            "zh-TW": "拒絕執行：{why}。",
            "en": "Refused: {why}.",
        },
    ),
    RefusalCode.CONFLICT: (
        "conflict",
        {
            "zh-TW": "假單 {leave_id} 的狀態剛被另一個請求變更（現在是 {current}），本次操作沒有執行。"
            "請重新用 search_leaves 查詢後再決定。",
            "en": "Leave {leave_id} was changed by another request (it is now {current}); nothing "
            "was done. Search again with search_leaves before deciding.",
        },
    ),
    RefusalCode.INVALID_STATUS: (
        "validation",
        {
            "zh-TW": "不支援的狀態「{requested}」。可用的狀態：{valid}。",
            "en": "Unknown status '{requested}'. Valid values: {valid}.",
        },
    ),
    RefusalCode.INVALID_DATE: (
        "validation",
        {
            "zh-TW": "日期「{value}」格式錯誤，請使用 YYYY-MM-DD（例如 2026-12-24）。",
            "en": "Date '{value}' is not valid; use YYYY-MM-DD (e.g. 2026-12-24).",
        },
    ),
    RefusalCode.END_BEFORE_START: (
        "validation",
        {
            "zh-TW": "結束日期 {end_date} 早於開始日期 {start_date}，請確認日期。",
            "en": "End date {end_date} is before start date {start_date}.",
        },
    ),
    RefusalCode.NO_WORKING_DAYS: (
        "validation",
        {
            "zh-TW": "{start_date} 到 {end_date} 之間沒有工作日，不需要請假。",
            "en": "There are no working days between {start_date} and {end_date}.",
        },
    ),
    RefusalCode.OVERLAP: (
        "validation",
        {
            "zh-TW": "日期與你現有的假單 {other_id}（{other_start}～{other_end}，{other_status}）重疊，"
            "請改日期，或先處理那張假單。",
            "en": "The dates overlap your leave {other_id} ({other_start} to {other_end}, "
            "{other_status}); choose other dates or deal with that leave first.",
        },
    ),
    RefusalCode.KEYWORD_TOO_LONG: (
        "validation",
        {
            "zh-TW": "搜尋關鍵字太長。請用最多 {max_words} 個詞、共 {max_chars} 個字元以內的關鍵字（例如假別、事由中的詞或日期），或用空字串列出全部假單。",
            "en": "The search keyword is too long. Use at most {max_words} words and {max_chars} characters (e.g. a leave type, a word of the reason or a date), or an empty string to list all leaves.",
        },
    ),
    RefusalCode.INVALID_LEAVE_TYPE: (
        "validation",
        {
            "zh-TW": "不支援的假別「{value}」。可用的假別：{allowed}。",
            "en": "Unknown leave type '{value}'. Valid types: {allowed}.",
        },
    ),
    RefusalCode.INVALID_REASON: (
        "validation",
        {
            "zh-TW": "請填寫請假事由（1 到 200 個字）。",
            "en": "Give a reason for the leave (1 to 200 characters).",
        },
    ),
    RefusalCode.INSUFFICIENT_BALANCE: (
        "insufficient_balance",
        {
            "zh-TW": "{leave_type}剩餘 {remaining} 天，不足以核准假單 {leave_id} 的 {days} 天。",
            "en": "Only {remaining} days of {leave_type} remain; leave {leave_id} needs {days}.",
        },
    ),
    RefusalCode.CONFIRMATION_DECLINED: (
        "declined",
        {
            "zh-TW": "使用者拒絕取消假單 {leave_id}，假單維持已核准，沒有任何變更。請直接告訴使用者結果，"
            "不要改用其他工具達成同樣的目的。",
            "en": "The user declined to cancel leave {leave_id}; it stays approved and nothing "
            "changed. Tell the user; do not try another tool to get the same effect.",
        },
    ),
    RefusalCode.CONFIRMATION_CANCELLED: (
        "declined",
        {
            "zh-TW": "使用者沒有完成確認，假單 {leave_id} 維持已核准，沒有任何變更。請告訴使用者結果，"
            "不要改用其他工具達成同樣的目的。",
            "en": "The user did not complete the confirmation; leave {leave_id} stays approved "
            "and nothing changed. Tell the user; do not try another tool instead.",
        },
    ),
    # Calls the SDK refuses before any tool runs: a name no tool has, arguments that do not fit
    # the tool's input schema (the problems name the fields, never quote the values).
    RefusalCode.UNKNOWN_TOOL: (
        "malformed_call",
        {
            "zh-TW": "沒有名為 {tool} 的工具。可用的工具：{valid}。",
            "en": "There is no tool named {tool}. Available tools: {valid}.",
        },
    ),
    RefusalCode.INVALID_ARGUMENTS: (
        "malformed_call",
        {
            "zh-TW": "{tool} 的參數不符合它的格式（{problems}），這次沒有執行。請依照工具的參數說明修正後重新呼叫。",
            "en": "The arguments of {tool} do not fit its input schema ({problems}); nothing was "
            "done. Correct them as the tool's parameters describe and call it again.",
        },
    ),
    RefusalCode.INTERNAL_ERROR: (
        "internal",
        {
            "zh-TW": "系統暫時無法處理這個請求，請稍後再試。",
            "en": "The leave system could not handle this request; try again later.",
        },
    ),
}

FORBIDDEN_REASONS = {
    "self_approval": {
        "zh-TW": "不能核准或駁回自己的假單",
        "en": "nobody may approve or reject their own leave",
    },
    "owner_only_submit": {
        "zh-TW": "只有假單申請人本人可以送出審核",
        "en": "only the owner of a leave may submit it",
    },
    "manager_only_decide": {
        "zh-TW": "只有申請人的直屬主管可以核准或駁回",
        "en": "only the owner's manager may approve or reject it",
    },
    "owner_only_cancel": {
        "zh-TW": "只有假單申請人本人可以取消已核准的假單",
        "en": "only the owner may cancel an approved leave",
    },
}

CONFIRM_QUESTION = {
    "zh-TW": "確定要取消已核准的假單 {leave_id}（{leave_type}，{start_date}～{end_date}，"
    "{days:g} 天）嗎？取消後將退回假期額度。",
    "en": "Cancel the approved leave {leave_id} ({leave_type}, {start_date} to {end_date}, "
    "{days:g} days)? The days go back to your balance.",
}

NO_NEXT_STEP = {"zh-TW": "無（已是最終狀態）", "en": "none (final status)"}
APPROVED_NEXT_STEP = {
    "zh-TW": "無（只能由申請人用 cancel_approved_leave 取消）",
    "en": "none (only the owner can cancel it with cancel_approved_leave)",
}


class Refusal(Exception):
    """A business rule said no. Carries a stable code and the values for its message."""

    def __init__(self, code: RefusalCode, **params: Any) -> None:
        super().__init__(code)
        self.code = code
        self.params = params

    @property
    def rule(self) -> str:
        return TEMPLATES[self.code][0]

    def render(self, language: str) -> str:
        template = TEMPLATES[self.code][1][language]
        return template.format(**{k: _localise(k, v, language) for k, v in self.params.items()})


def status_name(status: str, language: str) -> str:
    return STATUS_NAMES[language].get(status, status)


def _localise(key: str, value: Any, language: str) -> Any:
    if key in {"current", "requested", "other_status"} and isinstance(value, str):
        return status_name(value, language)
    if key == "why" and value in FORBIDDEN_REASONS:
        return FORBIDDEN_REASONS[value][language]
    if key == "allowed" and isinstance(value, list | tuple):
        if not value:
            return NO_NEXT_STEP[language]
        return "、".join(status_name(v, language) for v in value)
    if key == "valid" and isinstance(value, list | tuple):  # the values as a tool takes them
        return ("、" if language == "zh-TW" else ", ").join(value)
    if key == "allowed" and value == "approved_terminal":
        return APPROVED_NEXT_STEP[language]
    return value
