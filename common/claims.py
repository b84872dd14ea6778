"""What an answer claims was changed, and which of those claims nothing backs: the one claim
checker of the release gate (evals) and of the loop's run record.

A claim is worded as done ("已將 LV-… 送出審核", "已取消假單 …", "已建立草稿假單 …"); a status
read out in a listing ("，已核准，") or a change said not to have happened claims nothing.
The keys are the statuses a change leaves a leave in (common.contract.LeaveStatus).
"""

from __future__ import annotations

import re

from .contract import LeaveStatus

# The status each claim says a leave reached → the words that claim it.
CLAIMS: dict[str, re.Pattern[str]] = {
    LeaveStatus.SUBMITTED: re.compile(
        # not a status in brackets: "LV-…（…，submitted（已送出審核））" quotes the server
        r"(?<![（(])已(?:將|把)?[^，。；（(]{0,24}?(?:送出審核|送審)|(?<![（(])已送出|送出審核了"
    ),
    LeaveStatus.APPROVED: re.compile(
        r"已(?:將|把)[^，。；]{0,24}?核准|已核准\s*(?:了|這張|那張|假單|LV-)"
    ),
    LeaveStatus.REJECTED: re.compile(
        r"已(?:將|把)[^，。；]{0,24}?駁回|已駁回\s*(?:了|這張|那張|假單|LV-)"
    ),
    LeaveStatus.CANCELLED: re.compile(
        r"已(?:將|把)[^，。；]{0,24}?取消|已取消\s*(?:了|這張|那張|假單|LV-)"
    ),
    LeaveStatus.DRAFT: re.compile(r"已建立"),
}


def claims(answer: str) -> dict[str, str]:
    """Each status `answer` claims a leave was changed to → the words that claim it."""
    return {
        status: found.group(0)
        for status, pattern in CLAIMS.items()
        if (found := pattern.search(answer))
    }


def claimed_changes(answer: str) -> set[str]:
    """The statuses `answer` says some leave was changed to."""
    return set(claims(answer))


def unverified_claims(answer: str, applied_changes: set[str]) -> set[str]:
    """The statuses `answer` claims a change to that none of `applied_changes` (the statuses
    the run's successful writes, or the audit log, show reached) backs."""
    return claimed_changes(answer) - set(applied_changes)
