"""The API side priced as it is billed: input, cached input and output prices, and the share of
the API's input that repeats a prefix the API has already seen (derived, or set)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.cost.__main__ import main as cost_main
from loadtest.cost.calculate import Inputs, api_cached_share, calculate
from loadtest.cost.inputs import PromptTokens, Workload, prompt_tokens, workload
from loadtest.cost.presets import API_PRESETS, NO_CACHED_PRICE
from loadtest.cost.report import build, markdown
from loadtest.cost.settings import SettingError, load
from loadtest.summary import PromptPrefix

FIXTURE = Path(__file__).parents[1] / "fixtures" / "loadtest-summaries" / "6fc8601.json"

# Three model calls a request; the fine-tune's prompt is 55 tokens, the API's 1,200 (≥ 1,024, so
# an API caches it); the fine-tune reads 1,365 input tokens a request: 3 × 55 of system prompt
# and 1,200 of conversation.
WORK = Workload(
    unit="request", capacity_per_s=1000.0, input_tokens=1365, output_tokens=100, model_calls=3
)
PROMPTS = PromptTokens(finetune=55, api=1200, api_file="rules.txt")
FLAT_ONE_GPU = {
    "api_preset": "claude-haiku-4.5",  # $1 in / $0.10 cache read / $5 out per 1M
    "gpu_hourly_usd": "2",  # $48 a day
    "gpu_count": "1",
    "min_replicas": "1",
    "traffic_profile": "flat",
}


def inputs(**flags: str) -> Inputs:
    settings = load(None, {}, FLAT_ONE_GPU | flags).settings
    return Inputs(settings, WORK, PROMPTS)


def test_a_case_worked_by_hand_to_the_cent():
    """By hand:
    - API input = 1,365 + 3 calls × (1,200 − 55) = 1,365 + 3,435 = 4,800 tokens a request.
    - Conversation C = 1,365 − 3 × 55 = 1,200 tokens, growing evenly: call j reads j·c₁,
      C = c₁ · 3·4/2, so c₁ = 200; the shortest repeated prefix, 1,200 + 200, is ≥ 1,024.
    - Cached = the API prompt on call 1 (1,200) + on calls 2 and 3 the previous call's whole
      prompt (2 × 1,200 + C·(3 − 1)/(3 + 1) = 2,400 + 600): 4,200 tokens, 87.5 %; uncached 600.
    - Before: (4,800 × $1 + 100 × $5) / 1M = $0.0053 a request.
    - After: (600 × $1 + 4,200 × $0.10 + 100 × $5) / 1M = (600 + 420 + 500) / 1M = $0.00152.
    - Break-even, one GPU at $48 a day, flat, no hidden costs: 48 / 0.00152 = 31,578.9 a day
      (was 48 / 0.0053 = 9,056.6): 3.5 × further out.
    """
    f = calculate(inputs())
    assert f.api_input_tokens == pytest.approx(4800)
    assert f.api_cached_input_tokens == pytest.approx(4200)
    assert f.api_cached_share == pytest.approx(0.875)
    assert round(f.api_usd_per_request, 5) == 0.00152
    assert f.api_usd_per_request == pytest.approx(0.00152)
    found = f.break_even_with_hidden
    assert found is not None and found.requests_per_day == pytest.approx(48 / 0.00152)
    assert round(found.requests_per_day * f.api_usd_per_request, 2) == 48.00

    # no cached discount (the cached price set to the input price): the old formula
    uncached = calculate(inputs(api_cached_input_usd_per_million="1"))
    assert uncached.api_usd_per_request == pytest.approx(0.0053)
    found = uncached.break_even_with_hidden
    assert found is not None and found.requests_per_day == pytest.approx(48 / 0.0053)


def test_one_call_caches_the_api_prompt_only_and_a_short_prompt_nothing():
    one_call = Inputs(inputs().settings, WORK.__class__(**{**WORK.__dict__, "model_calls": 1}),
                      PROMPTS)  # fmt: skip
    # 1,365 − 55 = 1,310 of conversation + the 1,200-token prompt: only the prompt repeats
    assert api_cached_share(one_call)[0] == pytest.approx(1200 / (1365 + 1145))
    short = Inputs(inputs().settings, WORK, PromptTokens(55, 555, "short.txt"))
    # 555 + c₁ (200) < 1,024: no prefix an API would cache
    share, how = api_cached_share(short)
    assert share == 0 and "none cached" in how


def test_the_presets_carry_cached_prices_with_their_sources():
    expected = {
        "gpt-5-mini": (0.25, 0.025, 2.00),
        "gpt-4.1-mini": (0.40, 0.10, 1.60),
        "claude-haiku-4.5": (1.00, 0.10, 5.00),
    }
    for name, (price_in, cached, price_out) in expected.items():
        p = API_PRESETS[name]
        assert (p.api_input_usd_per_million, p.api_cached_input_usd_per_million) == (
            price_in,
            cached,
        )
        assert p.api_output_usd_per_million == price_out
        assert "cache" in p.cached_source and p.cached_date
    assert "1.25" in API_PRESETS["claude-haiku-4.5"].cached_source  # cache writes named
    for name in ("gemini-3.5-flash", "llama-3.1-8b-hosted-low", "llama-3.1-8b-hosted-high"):
        p = API_PRESETS[name]
        # no published cached price: billed as input, and the source says so
        assert p.api_cached_input_usd_per_million == p.api_input_usd_per_million
        assert p.cached_source == NO_CACHED_PRICE
    for p in API_PRESETS.values():
        assert p.api_cached_input_usd_per_million <= p.api_input_usd_per_million
    loaded = load(None, {}, {"api_preset": "gpt-4.1-mini"})
    assert loaded.settings.api_cached_input_usd_per_million == 0.10
    assert loaded.sources["api_cached_input_usd_per_million"].origin == (
        "preset gpt-4.1-mini (OpenAI list price, cached input, 2026)"
    )


def test_the_cached_price_and_share_are_settings(tmp_path):
    name = "api_cached_input_usd_per_million"
    by_env = load(None, {"COST_API_CACHED_INPUT_USD_PER_MILLION": "0.05"}, {})
    assert by_env.settings.api_cached_input_usd_per_million == 0.05
    assert by_env.sources[name].kind == "env"
    by_flag = load(None, {"COST_API_CACHED_INPUT_USD_PER_MILLION": "0.05"}, {name: "0.01"})
    assert by_flag.settings.api_cached_input_usd_per_million == 0.01
    assert by_flag.sources[name].setting == "--api-cached-input-usd-per-million"
    file = tmp_path / "cost.toml"
    file.write_text("api_cached_input_usd_per_million = 0.2\napi_cached_share = 0.5\n")
    by_file = load(file, {}, {})
    assert by_file.settings.api_cached_input_usd_per_million == 0.2
    assert by_file.settings.api_cached_share == 0.5
    # an input price of one's own without a cached one: the preset's cached price is dropped
    own = load(None, {}, {"api_input_usd_per_million": "0.01"})
    assert own.settings.api_cached_input_usd_per_million == 0.01
    assert "the input price" in own.sources[name].origin

    # the share set: (4,800 × 0.5 × $1 + 2,400 × $0.10 + 500) / 1M = $0.00314
    f = calculate(inputs(api_cached_share="0.5"))
    assert f.api_cached_share == 0.5 and f.api_usd_per_request == pytest.approx(0.00314)
    with pytest.raises(SettingError, match=r"^--api-cached-share: .*less than or equal to 1"):
        load(None, {}, {"api_cached_share": "1.5"})


@pytest.mark.parametrize(
    ("environ", "flags", "blamed"),
    [
        ({"COST_API_CACHED_INPUT_USD_PER_MILLION": "0.3"}, {}, "COST_API_CACHED_INPUT_USD_PER_MILLION"),
        ({}, {"api_preset": "claude-haiku-4.5", "api_cached_input_usd_per_million": "2"},
         "--api-cached-input-usd-per-million"),
    ],
)  # fmt: skip
def test_a_cached_price_above_the_input_price_is_refused_in_one_line(environ, flags, blamed):
    with pytest.raises(SettingError) as refused:
        load(None, environ, flags)
    message = str(refused.value)
    assert message.startswith(f"{blamed}: a cached-input price above the input price")
    assert "\n" not in message


def test_the_report_shows_the_cached_price_share_and_how_it_was_derived():
    loaded = load(None, {}, {})
    work = workload(FIXTURE, loaded)
    figures_in = Inputs(loaded.settings, work, prompt_tokens(loaded))
    f = calculate(figures_in)
    report = build(figures_in, f, loaded.sources, [])
    text = markdown(report)
    assert "GPT-5 mini at $0.25 in / $0.025 cached in / $2.00 out per 1M tokens" in report.title
    assert f"API input {f.api_cached_share:.0%} cached at $0.025/1M" in report.verdict
    assert 0.5 < f.api_cached_share < 1
    rows = {row[0]: row for table in report.tables for row in table.rows}
    share_row = rows["cached share of API input"]
    assert share_row[1].startswith(f"{f.api_cached_share:.0%} (")
    assert "prompt tokens per run" in share_row[2] and "turns per run" in share_row[2]
    assert rows["API cached input"][1:] == [
        "$0.025 per 1M tokens",
        "preset gpt-5-mini (OpenAI list price, cached input, 2026)",
    ]
    cached_row = rows["of which cached input (repeated prefix, at the cached price)"]
    assert cached_row[2] == f"{f.api_cached_input_tokens:,.0f} ({f.api_cached_share:.0%})"
    sensitivity = next(t for t in report.tables if t.title.startswith("Sensitivity"))
    assert "cached share of API input" in [row[0] for row in sensitivity.rows]
    assert "cached share of API input" in text


EXAMPLE_SETTINGS = Path(__file__).parents[2] / "loadtest" / "cost.example.toml"


def _docs_section(title: str, end: str) -> str:
    docs = (Path(__file__).parents[2] / "docs" / "loadtest.md").read_text()
    return " ".join(docs[docs.index(title) : docs.index(end)].split())


def _demo(**flags: str):
    loaded = load(EXAMPLE_SETTINGS, {}, flags)
    return calculate(Inputs(loaded.settings, workload(FIXTURE, loaded), prompt_tokens(loaded)))


def test_the_docs_worked_example_is_the_calculators_to_the_cent():
    """docs/loadtest.md's "Cached input" works the demo's summary with the example settings,
    without and with the cached price: each figure it quotes is this calculation's."""
    text = _docs_section("### Cached input", "### The report")
    before, after = _demo(api_cached_share="0"), _demo()
    assert f"API input {after.api_input_tokens:,.0f} tokens a run" in text
    assert f"of which {after.api_cached_input_tokens:,.0f} cached" in text
    assert f"({after.api_cached_share:.0%}".replace("%", " %") in text
    assert f"costs ${before.api_usd_per_request:.5f} a run" in text
    found = before.break_even_with_hidden
    assert found is not None
    assert f"wins from {found.requests_per_day:,.0f} runs a day" in text
    assert f"with it, ${after.api_usd_per_request:.6f} a run" in text
    assert after.break_even_with_hidden is None and "never wins always on with the hidden" in text
    for option in (after, before):
        seed = option.break_even_without_hidden
        assert seed is not None and f"{seed.requests_per_day:,.0f}" in text


def test_the_docs_peak_and_redundancy_table_is_the_calculators_to_the_cent():
    """docs/loadtest.md's "Peak hours, scaling down and redundancy": each row is the demo's
    summary with the example settings and that row's changes, each figure this calculation's."""
    text = _docs_section("### Peak hours, scaling down and redundancy", "### Ops labour")
    no_cache = {"api_cached_share": "0"}
    rows = [
        _demo(**no_cache, traffic_profile="flat", min_replicas="1"),
        _demo(**no_cache),
        _demo(),
        _demo(scaling="scale_down"),
    ]
    for f in rows:
        at, found = f.operating_point, f.break_even_with_hidden
        kept = f.with_hidden.min_replicas
        row = (
            f"| {f.with_hidden.traffic.peak_to_mean():.2f} | {kept} | {at.gpus} | "
            f"{at.gpu_hours_per_day:.0f} | ${at.self_host_usd_per_request:.4f} | "
            + ("never |" if found is None else f"{found.requests_per_day:,.0f} runs/day |")
        )
        assert row in text, row
    scaled = rows[3].break_even_with_hidden
    assert scaled is not None
    assert f"from {scaled.requests_per_day:,.0f} runs a day on {scaled.replicas * 1} GPUs" in text
    assert f"(${scaled.usd_per_day:,.2f} a day either way)" in text
    always = rows[2]
    full = always.with_hidden.requests_per_replica_day
    assert f"a full replica ({full:,.0f} runs a day)" in text
    assert f"brings the API ${full * always.api_usd_per_request:,.2f}" in text
    assert f"against its ${always.with_hidden.replica_usd_per_day:,.2f} of GPU time" in text
    assert f"from ${rows[1].api_usd_per_request:.5f} to ${always.api_usd_per_request:.6f}" in text
    assert f"$ {sum(always.hidden_usd_per_day.values()):.2f}/day".replace("$ ", "$") in text


def _with_records(flags: dict[str, str], records: PromptPrefix | None) -> Inputs:
    """The fixture's summary, its workload replaced by WORK and its prompt records by these."""
    loaded = load(None, {}, FLAT_ONE_GPU | flags)
    measured = workload(FIXTURE, loaded)
    assert measured.summary is not None
    facts = replace(measured.summary, prompt_prefix=records)
    work = replace(WORK, summary=facts, sources=measured.sources)
    return Inputs(loaded.settings, work, prompt_tokens(loaded) if "api_system_prompt_file" in
                  flags else PROMPTS)  # fmt: skip


def test_the_cached_share_measured_from_prompt_records_worked_by_hand():
    """Ten runs of three calls whose prompts were 400, 450 and 515 tokens (1,365 a run), the
    person's text 20 tokens. Repeated a run: 400 − 20 (the first call's prompt less the text)
    + 400 + 450 (each later call resends the one before) = 1,230 of 1,365.
    - At the API each call carries the longer prompt's 1,145 extra tokens, repeated too:
      input 1,365 + 3 × 1,145 = 4,800, cached 1,230 + 3 × 1,145 = 4,665 (97.1875 %); a call
      repeats 1,555 on average, above the 1,024 an API caches from.
    - (135 × $1 + 4,665 × $0.10 + 100 × $5) / 1M = $0.0011015 a request."""
    records = PromptPrefix(runs=10, calls=30, prompt_tokens=13_650, repeated_tokens=12_300)
    f = calculate(_with_records({}, records))
    assert f.api_cached_share_measured
    assert f.api_cached_input_tokens == pytest.approx(4665)
    assert f.api_cached_share == pytest.approx(0.971875)
    assert round(f.api_usd_per_request, 7) == 0.0011015
    assert "90% of the fine-tune's prompts in 30 model calls of 10 runs" in (f.api_cached_share_how)


def test_repeated_prefixes_under_the_api_minimum_are_not_cached():
    # the API gets the fine-tune's own short prompt: a call repeats 1,230 × 10 / 30 = 410 tokens
    records = PromptPrefix(runs=10, calls=30, prompt_tokens=13_650, repeated_tokens=12_300)
    inputs = _with_records({"api_system_prompt_file": ""}, records)
    share, how = api_cached_share(inputs)
    assert share == 0 and "410 tokens on average, under the 1,024" in how


def test_a_summary_without_prompt_records_says_so_in_one_line(tmp_path, capsys):
    # the fixture predates prompt records: the share is derived, and a note says why
    status = cost_main([str(FIXTURE), "--out", str(tmp_path), "--min-replicas", "2"])
    out = capsys.readouterr().out
    assert status == 0
    said = [line for line in out.splitlines() if "no prompt records" in line]
    assert len(said) == 1 and "derived from the prompts' lengths" in said[0]
    assert "derived from the prompts' lengths" in out.split("## Per")[0]  # in the headline


def test_vllm_s_prefix_cache_hit_rate_is_shown_next_to_the_records():
    records = PromptPrefix(runs=10, calls=30, prompt_tokens=13_650, repeated_tokens=12_300)
    inputs = _with_records({}, records)
    assert inputs.workload.summary is not None
    facts = replace(inputs.workload.summary, prefix_cache_hit_rate=0.42)
    inputs = replace(inputs, workload=replace(inputs.workload, summary=facts))
    sources = load(None, {}, FLAT_ONE_GPU).sources
    text = markdown(build(inputs, calculate(inputs), sources, []))
    (row,) = [line for line in text.splitlines() if "vLLM prefix-cache hit rate" in line]
    assert "42% of the prompt tokens in the capacity step" in row
    assert "vllm:prefix_cache_hits_total" in row
    # without it (no Prometheus, or an older summary) there is no such row
    plain = _with_records({}, records)
    assert "prefix-cache hit rate" not in markdown(build(plain, calculate(plain), sources, []))
