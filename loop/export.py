"""Finished runs as chat-format JSONL (messages + tools): the next round of fine-tuning data."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any, TextIO

from .store import RunRecord, SyncRunStore
from .views import run_of_record


def training_example(record: RunRecord) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": record.system_prompt},
        *record.history,
        *record.messages,
    ]
    if record.answer and (not record.messages or record.messages[-1].get("role") != "assistant"):
        messages.append({"role": "assistant", "content": record.answer})
    run = run_of_record(record)
    return {
        "messages": messages,
        "tools": record.tools,
        "metadata": {
            "run_id": run.id,
            "status": run.status,
            "turns": run.turns,
            "created_at": run.created_at,
            "claims_unverified": run.claims_unverified or [],
        },
    }


def export_runs(
    store: SyncRunStore,
    out: TextIO,
    *,
    status: str | None = "completed",
    without_tool_errors: bool = False,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    include_flagged: bool = False,
) -> int:
    """Write the selected runs; a run whose answer claims a change it did not make is not
    training data (it would teach the model to claim), unless `include_flagged`."""
    count = 0
    for record in _select(store, status, without_tool_errors, since, until):
        example = training_example(record)
        if example["metadata"]["claims_unverified"] and not include_flagged:
            continue
        out.write(json.dumps(example, ensure_ascii=False) + "\n")
        count += 1
    return count


def _select(
    store: SyncRunStore,
    status: str | None,
    without_tool_errors: bool,
    since: dt.datetime | None,
    until: dt.datetime | None,
) -> Iterator[RunRecord]:
    return store.finished_runs(
        status=status, without_tool_errors=without_tool_errors, since=since, until=until
    )
