"""Shapes the tools return (published to clients as `outputSchema`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LeaveView(BaseModel):
    leave_id: str = Field(description="The leave's real ID, exactly as search_leaves returned it.")
    employee_id: str
    employee_name: str
    leave_type: str
    start_date: str = Field(description="YYYY-MM-DD")
    end_date: str = Field(description="YYYY-MM-DD")
    days: float
    hours: float
    status: str = Field(description="draft | submitted | approved | rejected | cancelled")
    reason: str
    next_steps: list[str] = Field(
        default_factory=list,
        description="Statuses the caller may move this leave to with update_leave_status.",
    )


class SearchResult(BaseModel):
    count: int
    leaves: list[LeaveView]


class BalanceLine(BaseModel):
    leave_type: str
    remaining_days: float
    remaining_hours: float


class BalanceResult(BaseModel):
    employee_id: str
    employee_name: str
    balances: list[BalanceLine]


class StatusChange(BaseModel):
    leave_id: str
    from_status: str
    to_status: str
    leave: LeaveView


class CancelResult(BaseModel):
    leave_id: str
    from_status: str
    to_status: str
    restored_days: float
    leave: LeaveView
