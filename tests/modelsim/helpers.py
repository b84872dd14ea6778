"""What the simulator's tests share: the leave tools as a request offers them, the system
prompt, and the seed task's request."""

from __future__ import annotations

LEAVE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": p} for p in props},
                "required": list(props),
            },
        },
    }
    for name, props in (
        ("search_leaves", ("keyword",)),
        ("get_leave_balance", ()),
        ("create_leave", ("leave_type", "start_date", "end_date", "reason")),
        ("update_leave_status", ("leave_id", "status")),
        ("cancel_approved_leave", ("leave_id",)),
    )
]
SYSTEM = "你是差勤助手。更新假單前必須先查詢取得真實 ID；假單狀態只能逐級推進；使用者拒絕後不得改用其他工具達成。"
SEED_REQUEST = "把我那張家庭旅遊的特休送出審核"
