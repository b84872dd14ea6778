"""What `make demo` prints for each seed scenario, against the real services over sockets: the
confirmation inside the step that asked it, a declined one as what the person chose."""

from __future__ import annotations

import re

from devtools.demo import run_scenarios
from tests.support import loop_service, mcp_server, model_simulator


def blocks(out: str) -> dict[int, list[str]]:
    """Each scenario's lines, by its number."""
    found: dict[int, list[str]] = {}
    number = 0
    for line in out.splitlines():
        heading = re.match(r"^\[(\d+)\] ", line)
        if heading:
            number = int(heading.group(1))
        found.setdefault(number, []).append(line)
    return found


def test_a_declined_confirmation_is_shown_inside_its_step_as_the_users_choice(tmp_path, capsys):
    with (
        mcp_server(tmp_path) as mcp,
        model_simulator(tmp_path, profile="instant") as sim,
        loop_service(tmp_path, f"{sim}/v1", f"{mcp}/mcp") as (loop, _),
    ):
        assert run_scenarios(loop)
    scenarios = blocks(capsys.readouterr().out)
    declined, accepted = scenarios[3], scenarios[4]
    for lines, outcome, answer in (
        (declined, "✓ declined by the user: nothing changed", "decline"),
        (accepted, "✓ confirmed by the user", "accept"),
    ):
        (cancel,) = [i for i, x in enumerate(lines) if "tool   cancel_approved_leave" in x]
        assert lines[cancel].rstrip().endswith(outcome), lines[cancel]
        assert lines[cancel + 1].strip().startswith("confirmation asked: 確定要取消已核准的假單")
        assert lines[cancel + 2].strip() == f"answered: {answer}"
        assert "model  → answer" in lines[cancel + 3], "the next step follows the confirmation"
    assert not any("✗" in line for block in scenarios.values() for line in block)
