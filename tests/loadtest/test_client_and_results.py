"""The SSE reassembly and the exact statistics the summary is built from."""

from __future__ import annotations

import json
import math

import pytest

from common.sse import Parser
from common.stats import percentile
from loadtest.results import Slo, summarise

STREAM = (
    'data: {"a": "第一"}\n\n'
    "event: run.finished\r\ndata: line one\r\ndata: line two\r\n\r\n"
    ": keep-alive\n\n"
    "data: [DONE]\n\n"
).encode()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_sse_events_survive_any_cut_of_the_byte_stream(size):
    parser = Parser()
    events = []
    for i in range(0, len(STREAM), size):
        events += [(e.event, e.data, e.at) for e in parser.feed(STREAM[i : i + size], at=i)]
    assert [(kind, data) for kind, data, _ in events] == [
        ("message", '{"a": "第一"}'),
        ("run.finished", "line one\nline two"),
        ("message", "[DONE]"),
    ]
    # each event is stamped with the read that completed it, not an earlier or later one
    ends = [STREAM.index(b"\n\n") + 2, STREAM.index(b"\r\n\r\n") + 4, len(STREAM)]
    assert [at for _, _, at in events] == [((end - 1) // size) * size for end in ends]


def test_percentiles_are_exact_with_linear_interpolation():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50.5
    assert percentile(values, 95) == pytest.approx(95.05)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert percentile(reversed(values), 99) == pytest.approx(99.01)  # any order, any iterable
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile(values, 101)


def test_the_benchmarks_report_the_load_tests_percentile():
    """One definition: a benchmark's p99 of 60 runs is not the slowest run by another rule."""
    import benchmarks.mcp_roundtrip
    import benchmarks.overhead
    import benchmarks.router

    for module in (benchmarks.overhead, benchmarks.router, benchmarks.mcp_roundtrip):
        assert module.percentile is percentile, module.__name__


def _model(start, ttft, gaps, tokens, ok=True):
    e2e = ttft + sum(gaps)
    return {
        "kind": "model",
        "name": "chat",
        "start": start,
        "end": start + e2e / 1000,
        "ok": ok,
        "error": None if ok else "boom",
        "ttft_ms": ttft,
        "itl_ms": gaps,
        "tpot_ms": sum(gaps) / (tokens - 1),
        "e2e_ms": e2e,
        "prompt_tokens": 100,
        "output_tokens": tokens,
    }


def test_summary_per_step_and_capacity_at_the_slo():
    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000)
    steps = [{"step": 0, "users": 1, "start": 0.0}, {"step": 1, "users": 2, "start": 10.0}]
    records = [_model(t, 50, [10, 10], 3) for t in range(10)]  # meets the SLO
    records += [_model(10 + t / 2, 150, [30, 30], 3) for t in range(20)]  # breaks it
    summary = summarise(records, steps, slo)
    first, second = summary["steps"]
    assert first["model"]["requests"] == 10 and first["seconds"] == 10
    assert first["model"]["requests_per_s"] == 1.0
    assert first["model"]["output_tokens_per_s"] == 3.0
    assert first["model"]["input_tokens_per_s"] == 100.0
    assert first["model"]["ttft_ms"]["p99"] == 50 and first["model"]["itl_ms"]["p95"] == 10
    assert first["slo_met"] and first["model"]["slo_attainment"] == 1.0
    assert not second["slo_met"] and second["model"]["goodput_per_s"] == 0
    assert any("TTFT p99" in why for why in second["slo_broken"])
    assert summary["capacity_at_slo"]["step"] == 0
    assert summary["capacity_at_slo"]["output_tokens_per_s"] == 3.0
    json.dumps(summary)  # summary.json is plain JSON


def test_the_capacity_is_the_knee_not_a_step_that_met_the_slo_after_one_missed_it():
    """A step past the first miss that happens to meet the SLO (the noise at the knee, seen in
    `make bench-router`: 7 users broke it, 8 met it) is not capacity a team can count on."""
    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000)
    steps = [{"step": k, "users": k + 1, "start": 10.0 * k} for k in range(3)]
    records = [_model(t, 50, [10, 10], 3) for t in range(10)]  # step 0 meets the SLO
    records += [_model(10 + t / 2, 150, [30, 30], 3) for t in range(20)]  # step 1 misses it
    records += [_model(20 + t / 3, 50, [10, 10], 3) for t in range(30)]  # step 2 meets it again
    summary = summarise(records, steps, slo)
    assert [s["slo_met"] for s in summary["steps"]] == [True, False, True]
    assert summary["capacity_at_slo"]["step"] == 0


def test_errors_break_the_slo_and_are_counted():
    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000)
    records = [_model(0, 50, [10], 2), _model(1, 50, [10], 2, ok=False)]
    step = summarise(records, [{"step": 0, "users": 2, "start": 0.0}], slo)["steps"][0]
    assert step["errors"] == 1 and step["error_ratio"] == 0.5
    assert not step["slo_met"]
    assert summarise(records, [], slo)["capacity_at_slo"] is None


def _facade(start, first, run, ok=True):
    return {
        "kind": "facade",
        "name": "query",
        "start": start,
        "end": start + run / 1000,
        "ok": ok,
        "error": None if ok else "run did not complete (finish_reason length)",
        "first_answer_ms": first,
        "run_ms": run,
        "prompt_tokens": 3000,
        "output_tokens": 100,
        "finish_reason": "stop" if ok else None,
    }


def test_facade_runs_have_their_own_block_slo_and_capacity_figures():
    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000, facade_run_p95_ms=800)
    steps = [{"step": 0, "users": 1, "start": 0.0}, {"step": 1, "users": 2, "start": 10.0}]
    records = [_facade(t, 300, 600) for t in range(10)]  # within 800 ms
    records += [_facade(10 + t / 2, 300, 1200) for t in range(20)]  # within 5 s, not 800 ms
    records += [_model(t, 50, [10, 10], 3) for t in range(10)]
    summary = summarise(records, steps, slo)
    first, second = summary["steps"]
    assert first["facade"]["runs"] == 10 and first["facade"]["runs_per_s"] == 1.0
    assert (
        first["facade"]["run_ms"]["p95"] == 600 and first["facade"]["first_answer_ms"]["p50"] == 300
    )
    assert first["slo_met"] and first["agent"] is None
    assert not second["slo_met"] and second["facade"]["goodput_per_s"] == 0
    assert second["slo_broken"] == ["facade run latency p95 1200.0 ms > 800"]
    capacity = summary["capacity_at_slo"]
    assert capacity["facade_runs_per_s"] == 1.0 and capacity["runs_per_s"] == 0.0
    # every token the model served counts in the rates: the facade's 300/s and the model's 3/s
    assert capacity["output_tokens_per_s"] == 100 + 3
    assert summary["slo"]["facade_run_p95_ms"] == 800


def test_a_facade_run_that_did_not_complete_is_an_error():
    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000)
    records = [_facade(0, 300, 600), _facade(1, 300, 600, ok=False)]
    step = summarise(records, [], slo)["steps"][0]
    assert step["facade"]["errors"] == 1 and step["error_ratio"] == 0.5
    assert step["error_examples"] == ["run did not complete (finish_reason length)"]
    # without a facade SLO of its own, a facade run is held to the agent runs' one
    assert summarise(records, [], slo)["slo"]["facade_run_p95_ms"] == 5000


def test_the_sweep_stops_only_on_a_logged_miss(tmp_path):
    from loadtest.results import RawLog, Slo, step_missed_slo

    slo = Slo(ttft_p99_ms=100, itl_p99_ms=50, run_p95_ms=5000)
    (tmp_path / "steps.jsonl").write_text('{"step": 0, "users": 1, "start": 0.0}\n')
    # nothing logged here (a worker elsewhere): not judged
    assert step_missed_slo(tmp_path, slo) == []
    log = RawLog(tmp_path)

    log.write(_model(1.0, 40, [10.0], 2))
    assert step_missed_slo(tmp_path, slo) == []
    # a new step is judged on its own requests only
    with (tmp_path / "steps.jsonl").open("a") as steps:
        steps.write('{"step": 1, "users": 2, "start": 10.0}\n')
    log.write(_model(11.0, 40, [10.0], 2))
    log.write(_model(12.0, 400, [10.0], 2))
    assert step_missed_slo(tmp_path, slo) == ["TTFT p99 396.4 ms > 100"]
    log.close()


def test_run_latency_and_the_slo_leave_out_the_time_a_question_waited_for_its_answer():
    """Runs of 6 s that spent 4.5 s of it between a question arriving and the answer going
    out worked 1.5 s: within a 5 s SLO, with both figures in the summary."""
    from tests.loadtest.records import agent_record

    slo = Slo(ttft_p99_ms=100, itl_p99_ms=20, run_p95_ms=5000)
    waited = [{**agent_record(t, 6000), "confirmation_wait_ms": 4500.0} for t in range(10)]
    step = summarise(waited, [], slo)["steps"][0]
    assert step["agent"]["run_ms"]["p95"] == 1500 and step["agent"]["run_wall_ms"]["p95"] == 6000
    assert step["slo_met"] and step["agent"]["goodput_per_s"] > 0
    assert step["agent"]["scenarios"]["query"]["run_ms_p95"] == 1500
    # working time over the SLO still breaks it, whatever the waits
    slow = [{**agent_record(t, 9000), "confirmation_wait_ms": 2000.0} for t in range(10)]
    step = summarise(slow, [], slo)["steps"][0]
    assert step["slo_broken"] == ["run latency p95 7000.0 ms > 5000"]
    # runs that never waited have one figure, as before
    assert "run_wall_ms" not in summarise([agent_record(0, 900)], [], slo)["steps"][0]["agent"]
