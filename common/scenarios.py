"""The requests the demo, the load test and the release gate make, defined once. Each consumer
picks the ones it needs and adds only its own expectations (the demo the tools and the answer
it prints, the load test its weights and the leaves each user needs, the gate the end state it
scores in the database: evals/scenarios.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .runs_protocol import ConfirmAction

# The requests, with `{reason}` the words that name the leave in its reason (empty: all).
SUBMIT = "把我那張{reason}的特休送出審核"
QUERY = "查一下我{reason}的假單"
CANCEL = "取消我{reason}那張假"
FOLLOW_UP = "剛剛那張也送出審核"  # a second request in the same session

# The seed data's leaves, by the words of their reasons (mcp_server/seed.py, employee E001).
SEED_DRAFT = "家庭旅遊"  # a draft
SEED_APPROVED = "表妹婚禮"  # an approved leave


@dataclass(frozen=True)
class SeedScenario:
    """A request on the seed data, and how the person answers its confirmation."""

    name: str
    template: str
    words: str  # the seed leave's words in the template ("" for every leave)
    answer: ConfirmAction | None = None  # None: it asks none

    @property
    def request(self) -> str:
        return self.template.format(reason=self.words)


SUBMIT_DRAFT = SeedScenario("submit", SUBMIT, SEED_DRAFT)
QUERY_ALL = SeedScenario("query", QUERY, "")
CANCEL_DECLINED = SeedScenario("cancel-decline", CANCEL, SEED_APPROVED, "decline")
CANCEL_ACCEPTED = SeedScenario("cancel-accept", CANCEL, SEED_APPROVED, "accept")
SEED_SCENARIOS = (SUBMIT_DRAFT, QUERY_ALL, CANCEL_DECLINED, CANCEL_ACCEPTED)
