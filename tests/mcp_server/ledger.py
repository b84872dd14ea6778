"""Reading a leave service's books directly, below its tools: a balance, a leave's status."""

from __future__ import annotations

from mcp_server.leaves import LeaveService
from mcp_server.storage import Balance


def balance_of(service: LeaveService, employee_id: str, leave_type: str) -> float:
    with service.db.read() as s:
        return s.get(Balance, (employee_id, leave_type)).remaining_days


def status_of(service: LeaveService, leave_id: str) -> str:
    return service.visible_leave("M001", leave_id).status
