"""The cost calculator's formulas: the seed article's break-even as a special case, a case
computed by hand, the whole-GPU staircase and the utilisation maths."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from loadtest.cost.calculate import Inputs, calculate
from loadtest.cost.inputs import PromptTokens, Workload, prompt_tokens, workload
from loadtest.cost.maths import (
    FLAT,
    SelfHost,
    Traffic,
    _walk_break_even,
    break_even,
    fixed_usd_per_day,
    replicas_needed,
)
from loadtest.cost.settings import load


def inputs_from_flags(**flags: object) -> Inputs:
    """The calculator's own chain (settings → workload → prompts) without a summary file."""
    loaded = load(None, {}, {k: str(v) for k, v in flags.items()})
    return Inputs(loaded.settings, workload(None, loaded), prompt_tokens(loaded))


@pytest.mark.parametrize(
    ("gpu_usd_per_hour", "input_tokens", "output_tokens", "usd_per_million"),
    [
        (3.59, 3000, 100, 0.5),  # the stack's default GPU price
        (2.0, 800, 200, 2.0),
        (6.35, 12_345, 678, 0.61),
        (1.49, 500, 0, 0.05),
    ],
)
def test_the_seed_formula_is_the_special_case(
    gpu_usd_per_hour, input_tokens, output_tokens, usd_per_million
):
    # one GPU, flat traffic, no hidden costs, one blended price, the same prompt for both
    inputs = inputs_from_flags(
        gpu_hourly_usd=gpu_usd_per_hour,
        gpu_count=1,
        min_replicas=1,  # the seed's one GPU: no second replica kept for redundancy
        traffic_profile="flat",
        api_blended_usd_per_million=usd_per_million,
        api_system_prompt_file="",
        capacity_requests_per_s=1000,  # so much that one GPU serves any break-even here
        input_tokens_per_request=input_tokens,
        output_tokens_per_request=output_tokens,
    )
    figures = calculate(inputs)
    tokens_per_request = input_tokens + output_tokens
    price_per_token = usd_per_million / 1_000_000
    seed = (gpu_usd_per_hour * 24) / (tokens_per_request * price_per_token)
    for found in (figures.break_even_with_hidden, figures.break_even_without_hidden):
        assert found is not None and found.replicas == 1
        # the same formula, its operations in another order: equal to the last bits of a float
        assert found.requests_per_day == pytest.approx(seed, rel=1e-12)


def test_a_case_computed_by_hand():
    settings = load(
        None,
        {},
        {
            "gpu_hourly_usd": "2.0",
            "gpu_count": "2",  # a replica: 2 GPUs, $4/h, $96 a day
            "traffic_profile": "office_hours",
            # all requests in the 8 hours 09:00–17:00, 12.5 % each
            "daily_profile": ",".join(["0"] * 9 + ["12.5"] * 8 + ["0"] * 7),
            "peak_factor": "1.5",
            "ops_usd_per_month": "3650",  # 3650 / (365/12) = $120/day
            "retraining_usd": "900",
            "retraining_every_days": "90",  # $10/day
            "api_input_usd_per_million": "1",
            "api_output_usd_per_million": "4",
            "requests_per_day": "100000",
        },
    ).settings
    work = Workload(
        unit="request", capacity_per_s=2.0, input_tokens=1000, output_tokens=250, model_calls=2
    )
    prompts = PromptTokens(finetune=55, api=555, api_file="rules.txt")  # +500 tokens per call
    f = calculate(Inputs(settings, work, prompts))

    # API: input 1000 + 2 calls × 500 = 2000 tokens; (2000 × $1 + 250 × $4) / 1M = $0.003
    assert f.api_input_tokens == 2000 and f.api_output_tokens == 250
    assert f.api_usd_per_request == pytest.approx(0.003)
    # peak: all requests in 8 h, busiest moment 1.5× their mean → 1.5 / 28,800 s per daily
    # request; one replica (2 req/s) serves 2 × 28,800 / 1.5 = 38,400 requests a day
    assert f.with_hidden.requests_per_replica_day == pytest.approx(38_400)
    assert f.with_hidden.traffic.peak_to_mean() == pytest.approx(4.5)  # 86,400 / 19,200
    assert sum(f.hidden_usd_per_day.values()) == pytest.approx(130)  # 120 + 10
    # a full replica saves 0.003 × 38,400 − 96 = $19.20/day; n = ceil(130 / 19.2) = 7 replicas;
    # break-even = (7 × 96 + 130) / 0.003 = 802 / 0.003 = 267,333.3 requests/day
    with_hidden = f.break_even_with_hidden
    assert with_hidden is not None
    assert with_hidden.replicas == 7
    assert with_hidden.usd_per_day == pytest.approx(802)
    assert with_hidden.requests_per_day == pytest.approx(267_333.333333)
    # never dearer from m = ceil((130 + 115.2) / 19.2) = 13: (12 × 96 + 130) / 0.003 = 427,333.3
    assert with_hidden.cheaper_from_requests_per_day == pytest.approx(427_333.333333)
    # without hidden costs: flat over 24 h, one replica serves 172,800 a day, 96 / 0.003 = 32,000
    without = f.break_even_without_hidden
    assert without is not None and without.replicas == 1
    assert without.requests_per_day == pytest.approx(32_000)
    # at 100,000 requests/day: peak 100,000 / 19,200 = 5.21 req/s → 3 replicas (6 GPUs);
    # 3 × 96 + 130 = $418/day; utilisation 100,000 / (3 × 2 × 86,400) = 19.3 %
    at = f.operating_point
    assert (at.replicas, at.gpus) == (3, 6)
    assert at.self_host_usd_per_day == pytest.approx(418)
    assert at.api_usd_per_day == pytest.approx(300)
    assert at.utilisation == pytest.approx(0.192901234)
    # $/1M tokens at that volume: 418 / (100,000 × 1,250 tokens) × 1M = $3.344
    assert at.self_host_usd_per_million_tokens == pytest.approx(3.344)
    # at capacity: $4/h ÷ 3600 s ÷ 2 req/s = $0.000556 per request
    assert f.self_host_usd_per_request_at_capacity == pytest.approx(4 / 3600 / 2)
    # sensitivity ±25 %: GPU $1.50/h → g = $72, a·c − g = 43.2, n = ceil(130 / 43.2) = 4,
    # (4 × 72 + 130) / 0.003 = 139,333.3; GPU $2.50/h → g = $120 > 115.2: never.
    # capacity 2.5/s → c = 48,000, margin 144 − 96 = 48, n = 3, (3 × 96 + 130) / 0.003 = 139,333.3;
    # capacity 1.5/s → a·c = 86.4 < 96: never. Hidden costs × 0.75 = 97.5 → n = ceil(5.08) = 6,
    # (6 × 96 + 97.5) / 0.003 = 224,500; × 1.25 = 162.5 → n = 9, (9 × 96 + 162.5) / 0.003 = 342,166.7
    swings = {x.name: x for x in f.sensitivity}
    gpu, capacity, hidden = (
        swings["GPU $/h"],
        swings["capacity per replica"],
        swings["hidden fixed costs"],
    )
    assert (gpu.low, gpu.high) == (pytest.approx(1.5), pytest.approx(2.5))
    assert gpu.break_even_low == pytest.approx(139_333.333333) and gpu.break_even_high is None
    assert capacity.break_even_low is None
    assert capacity.break_even_high == pytest.approx(139_333.333333)
    assert hidden.break_even_low == pytest.approx(224_500)
    assert hidden.break_even_high == pytest.approx(342_166.666667)
    # a swing that turns the answer into "never" ranks above any finite one
    assert f.sensitivity[-1].name == "hidden fixed costs"  # the only finite swing here


def test_replicas_are_whole_and_sized_for_the_peak():
    office = Traffic.busy_hours(8, 1.0)  # one replica: 10/s × 28,800 s
    assert replicas_needed(0, 10, office) == 1  # kept up even when nobody asks
    assert replicas_needed(1, 10, office) == 1
    assert replicas_needed(288_000, 10, office) == 1  # exactly full
    assert replicas_needed(288_001, 10, office) == 2
    assert replicas_needed(288_000 * 7, 10, office) == 7
    assert replicas_needed(288_000 * 7 + 1, 10, office) == 8
    # the same volume spread over the whole day needs a third of the replicas
    assert replicas_needed(288_000 * 6, 10, FLAT) == 2


def test_daily_cost_is_a_staircase():
    option = SelfHost(
        replica_usd_per_hour=3.0,
        capacity_per_s=1.0,
        traffic=FLAT,
        fixed_usd_per_day=10,
    )
    full = 86_400  # requests a replica serves in a flat day at 1 req/s
    assert option.requests_per_replica_day == full
    assert [option.usd_per_day(d) for d in (1, full, full + 1, 2 * full, 2 * full + 1)] == [
        82,
        82,
        154,
        154,
        226,
    ]


@pytest.mark.parametrize(
    ("traffic", "peak_to_mean"),
    [
        (FLAT, 1.0),
        (Traffic.busy_hours(8, 1.0), 3.0),  # a GPU billed 24 h is busy a third of the day
        (Traffic.busy_hours(9, 0.9), 2.4),  # 0.9 × 24 / 9
        (Traffic.busy_hours(8, 1.0, 1.25), 3.75),
        # a profile whose quiet hours are the busier ones: those set the peak
        (Traffic.busy_hours(12, 0.05), 1.9),  # 0.95 × 24 / 12
        # no quiet hours left (a sensitivity step can push busy hours to 24): all of it in 24 h
        (Traffic.busy_hours(24, 0.9), 1.0),
    ],
)
def test_peak_to_mean_and_utilisation_at_a_full_replica(traffic, peak_to_mean):
    assert traffic.peak_to_mean() == pytest.approx(peak_to_mean)
    option = SelfHost(3.0, 2.0, traffic)
    # a replica sized for the peak is, over the day, busy mean ÷ peak of the time
    assert option.utilisation(option.requests_per_replica_day) == pytest.approx(1 / peak_to_mean)
    assert option.utilisation(option.requests_per_replica_day / 2) == pytest.approx(
        0.5 / peak_to_mean
    )


def test_scaled_down_a_replica_runs_only_the_hours_that_need_it():
    """All traffic in 8 hours, one replica full at their peak: always on it runs 24 h and is
    busy a third of them; scaled down with no floor it runs the 8 busy hours, busy all of
    them, for a third of the cost; floors add their hours back."""
    always = SelfHost(3.0, 2.0, Traffic.busy_hours(8, 1.0))
    full = always.requests_per_replica_day
    assert always.replica_hours(full) == 24 and always.usd_per_day(full) == 72
    scaled = replace(always, scale_down=True, off_hours_min_replicas=0)
    assert scaled.hourly_replicas(full) == [0] * 9 + [1] * 8 + [0] * 7
    assert scaled.usd_per_day(full) == 24
    assert scaled.utilisation(full) == pytest.approx(1.0)
    # two kept in the working hours for redundancy, one at night: 8 × 2 + 16 × 1 = 32 h
    kept = replace(scaled, min_replicas=2, off_hours_min_replicas=1)
    assert kept.replica_hours(full) == 32
    # three replicas' worth at the peak: three in each busy hour, the floor elsewhere
    assert kept.hourly_replicas(3 * full) == [1] * 9 + [3] * 8 + [1] * 7


def test_fixed_costs_per_day():
    # 365/12 days a month; retraining spread over its cadence
    assert fixed_usd_per_day(365, 0, 1, 0) == pytest.approx(12)
    assert fixed_usd_per_day(0, 300, 30, 0) == pytest.approx(10)
    assert fixed_usd_per_day(0, 0, 1, 36.5) == pytest.approx(1.2)


def test_no_break_even_when_a_full_replica_costs_more_than_the_api():
    option = SelfHost(4.0, 1.0, FLAT)  # $96/day for 86,400 requests
    assert break_even(option, 96 / 86_400 * 0.999) is None
    assert break_even(option, 0) is None
    assert break_even(option, 96 / 86_400 * 1.001) is not None


def test_the_staircase_can_hand_the_api_a_window_after_the_break_even():
    # a full replica's API bill is 1.2 × its GPU-day: self-hosting wins at 0.83 of a replica,
    # loses again just after the second GPU starts, and always wins from 5 GPU-days ÷ a
    option = SelfHost(1.0, 1.0, FLAT)  # g = $24/day, c = 86,400/day
    a = 1.2 * 24 / 86_400
    found = break_even(option, a)
    assert found is not None and found.replicas == 1
    assert found.requests_per_day == pytest.approx(24 / a)
    assert found.cheaper_from_requests_per_day == pytest.approx(5 * 24 / a)
    assert option.usd_per_day(86_401) > 86_401 * a  # the window


@pytest.mark.parametrize("seed", range(40))
def test_break_even_agrees_with_a_scan_of_both_costs(seed):
    rng = random.Random(seed)
    option = SelfHost(
        replica_usd_per_hour=rng.uniform(0.5, 8),
        capacity_per_s=rng.uniform(0.05, 3),
        traffic=Traffic.busy_hours(rng.choice([6, 8, 9, 12, 24]), 1.0, rng.choice([1.0, 1.5])),
        fixed_usd_per_day=rng.choice([0, rng.uniform(1, 400)]),
    )
    a = option.replica_usd_per_day / option.requests_per_replica_day * rng.uniform(1.01, 3)
    found = break_even(option, a)
    assert found is not None
    c = option.requests_per_replica_day
    volumes = [found.requests_per_day * k / 400 for k in range(1, 1200)]
    dearer = [d for d in volumes if option.usd_per_day(d) > d * a * (1 + 1e-9)]
    cheaper = [d for d in volumes if option.usd_per_day(d) < d * a * (1 - 1e-9)]
    # nothing before the break-even is cheaper to self-host; the first point past it is
    assert all(d > found.requests_per_day * (1 - 1e-9) for d in cheaper)
    assert cheaper and cheaper[0] == pytest.approx(found.requests_per_day * 401 / 400)
    # past cheaper_from, self-hosting is never dearer
    assert all(d < found.cheaper_from_requests_per_day * (1 + 1e-9) for d in dearer)
    assert found.replicas == math.ceil(found.requests_per_day / c - 1e-9)


def test_replicas_kept_for_redundancy_are_paid_for_at_any_volume_and_move_the_break_even():
    """Worked by hand: a replica-day g = $100, fixed h = $50/day, the API a = $0.002/request,
    one replica serves c = 100,000 requests/day (flat traffic)."""
    option = SelfHost(
        replica_usd_per_hour=100 / 24,
        capacity_per_s=100_000 / 86_400,
        traffic=FLAT,
        fixed_usd_per_day=50,
        min_replicas=2,
    )
    assert option.replicas(1) == 2 and option.replicas(150_000) == 2
    assert option.replicas(250_000) == 3
    assert option.usd_per_day(1) == pytest.approx(250)
    found = break_even(option, 0.002)
    # one replica would break even at (g + h)/a = 75,000/day; two kept running at (2g + h)/a
    assert found is not None and found.replicas == 2
    assert found.requests_per_day == pytest.approx(125_000)
    single = break_even(replace(option, min_replicas=1), 0.002)
    assert single is not None and single.requests_per_day == pytest.approx(75_000)


def _random_profile(rng: random.Random) -> Traffic:
    weights = [rng.choice([0, 0.2, 1, 3, 8]) for _ in range(24)]
    weights[rng.randrange(24)] += 1  # never all zero
    total = sum(weights)
    return Traffic(tuple(w / total for w in weights), rng.choice([1.0, 1.3]))


@pytest.mark.parametrize("seed", range(30))
def test_the_walk_agrees_with_the_closed_form_when_always_on(seed):
    """Always on, every hour is the peak hour's staircase: the walk over hourly breakpoints
    must land where the closed form does."""
    rng = random.Random(seed)
    option = SelfHost(
        replica_usd_per_hour=rng.uniform(0.5, 8),
        capacity_per_s=rng.uniform(0.05, 3),
        traffic=_random_profile(rng),
        fixed_usd_per_day=rng.choice([0, rng.uniform(1, 400)]),
        min_replicas=rng.choice([1, 2, 3]),
    )
    a = option.replica_usd_per_day / option.requests_per_replica_day * rng.uniform(1.05, 3)
    closed, walked = break_even(option, a), _walk_break_even(option, a)
    assert closed is not None and walked is not None
    assert walked.requests_per_day == pytest.approx(closed.requests_per_day, rel=1e-9)
    assert walked.replicas == closed.replicas
    assert walked.cheaper_from_requests_per_day == pytest.approx(
        closed.cheaper_from_requests_per_day, rel=1e-9
    )


@pytest.mark.parametrize("seed", range(30))
def test_scaled_down_break_even_agrees_with_a_scan_of_both_costs(seed):
    rng = random.Random(seed)
    option = SelfHost(
        replica_usd_per_hour=rng.uniform(0.5, 8),
        capacity_per_s=rng.uniform(0.05, 3),
        traffic=_random_profile(rng),
        fixed_usd_per_day=rng.choice([0, rng.uniform(1, 200)]),
        min_replicas=rng.choice([1, 2]),
        scale_down=True,
        off_hours_min_replicas=rng.choice([0, 1]),
    )
    # the API a little to a lot dearer than the marginal self-hosted request
    marginal = option.usd_per_day(1e7) / 1e7
    a = marginal * rng.uniform(1.1, 3)
    found = break_even(option, a)
    assert found is not None
    volumes = [found.cheaper_from_requests_per_day * k / 500 for k in range(1, 1500)]
    cheaper = [d for d in volumes if option.usd_per_day(d) < d * a * (1 - 1e-9)]
    dearer = [d for d in volumes if option.usd_per_day(d) > d * a * (1 + 1e-9)]
    # nothing before the break-even is cheaper to self-host, and from cheaper_from nothing
    # is dearer
    assert all(d > found.requests_per_day * (1 - 1e-9) for d in cheaper)
    assert all(d < found.cheaper_from_requests_per_day * (1 + 1e-9) for d in dearer)
    # at the break-even itself both cost the same
    assert option.usd_per_day(found.requests_per_day) == pytest.approx(a * found.requests_per_day)


def test_scaling_down_off_hours_worked_by_hand():
    """All requests in 8 hours (12.5 % each), one replica serves 1 request/s at the SLO at
    $2/h, the API costs $0.001 a request, no fixed costs.
    - A replica full at the peak serves 3,600 s ÷ 12.5 % = 28,800 requests a day.
    - Always on: never. A full replica brings the API's 28,800 × $0.001 = $28.80 a day and
      costs 24 h × $2 = $48 of GPU time.
    - Scaled down with nobody kept off-hours: a replica runs only the 8 busy hours ($16/day
      for 28,800 requests, $28.80 at the API), 2 kept in them: $32/day; the API reaches $32
      at 32,000/day, in the 2-replica stretch (≤ 57,600): break-even 32,000/day."""
    traffic = Traffic.busy_hours(8, 1.0)
    always = SelfHost(2.0, 1.0, traffic, min_replicas=2)
    assert always.requests_per_replica_day == pytest.approx(28_800)
    assert break_even(always, 0.001) is None
    scaled = replace(always, scale_down=True, off_hours_min_replicas=0)
    assert scaled.usd_per_day(32_000) == 32
    found = break_even(scaled, 0.001)
    assert found is not None
    assert found.requests_per_day == pytest.approx(32_000)
    assert (found.replicas, found.usd_per_day) == (2, 32)
    # past 57,600 the third replica's 8 hours cost $16 more: $48 against the API's $57.60 —
    # still cheaper, and so at every volume after: never dearer from the break-even on
    assert found.cheaper_from_requests_per_day == pytest.approx(32_000)
