"""`python -m evals export-failures REPORT --out FILE.jsonl`: a report's failing samples as a
chat-format dataset (OpenAI fine-tuning's messages + tools) for the next fine-tune.

What is written, and what is not: each failing sample's conversation exactly as the model had
it (the system prompt, the person's turns, the model's tool calls and answers, the tools'
results) with the tool schemas it was offered. The suite knows the right end state, not the
right words, so no corrected turn is made up: every assistant message carries `"weight": 0`
(fine-tuning does not learn from it as it stands) and `metadata.failure` says what was wrong
(goal missed, the untrue claims, each malformed call by tool, argument and how),
`metadata.expected` what the right end state is and, where the scenario knows them,
`metadata.right_calls` the calls a right run makes (the tool and the arguments that must be so,
with the sample's real leave ids and dates; the others, a search's keyword or a reason, are the
model's to word). Someone corrects the assistant turns, sets
their weight to 1, and the record is training data; left as is, it is an evaluation case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .report import GateReport
from .runner import Sample


def failure_record(sample: Sample, report: GateReport, what: str) -> dict[str, Any] | None:
    if sample.transcript is None:
        return None
    messages = [
        {**m, "weight": 0} if m.get("role") == "assistant" else m
        for m in sample.transcript.get("messages", [])
    ]
    return {
        "messages": messages,
        "tools": sample.transcript.get("tools", []),
        "metadata": {
            "scenario": sample.scenario,
            "sample": sample.sample,
            "expected": what,
            "right_calls": sample.right_calls,
            "failure": {
                "goal_missed": not sample.goal,
                "status": sample.status,
                "untrue": sample.untrue,
                "malformed": [str(call) for call in sample.malformed_calls],
            },
            "model": report.endpoint.model,
            "report_made_at": report.made_at,
        },
    }


def export_failures(report_path: Path, out: Path) -> tuple[int, int]:
    """(records written, failing samples with no conversation kept: skipped)."""
    report = GateReport.model_validate_json(report_path.read_text())
    whats = {row.scenario: row.what for row in report.scenarios}
    written = skipped = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as file:
        for sample in report.samples:
            if not sample.failed:
                continue
            record = failure_record(sample, report, whats.get(sample.scenario, ""))
            if record is None:
                skipped += 1
                continue
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
    return written, skipped
