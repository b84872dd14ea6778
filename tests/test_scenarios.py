"""The demo, the load test and the gate make the same seed requests, from one catalogue
(common/scenarios.py), and answer their confirmations alike."""

from __future__ import annotations

from common.scenarios import SEED_SCENARIOS
from devtools.demo import SCENARIOS as DEMO
from evals.scenarios import SCENARIOS as GATE
from loadtest.scenarios import AGENT_MIX


def test_the_demo_makes_the_seed_requests_and_answers_them_as_the_catalogue_says():
    assert [(s.request, s.confirm) for s in DEMO] == [(s.request, s.answer) for s in SEED_SCENARIOS]


def test_the_gate_scores_the_seed_requests_with_the_catalogue_s_answers():
    first_turns = {(t.text, t.answer) for s in GATE for t in s.turns[:1]}
    assert {(s.request, s.answer) for s in SEED_SCENARIOS} <= first_turns


def test_the_load_test_makes_the_seed_requests_on_each_user_s_own_leaves():
    by_name = {s.name: s for s in AGENT_MIX}
    for seed in SEED_SCENARIOS:
        mine = by_name[seed.name]
        assert (mine.request, mine.answer) == (seed.template, seed.answer)
