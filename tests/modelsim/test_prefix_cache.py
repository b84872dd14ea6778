"""The simulated prefix cache: vLLM's KV blocks, hash chain, LRU eviction (unit level), and a
session's turns through the real simulator process (HTTP level)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common import tokens
from modelsim.prefix_cache import PrefixCache
from modelsim.prompt import answer_tokens, prompt_tokens
from tests.support import model_simulator

from .exposition import sample_value
from .helpers import LEAVE_TOOLS, SEED_REQUEST, SYSTEM


def seq(name: str, n: int) -> list[str]:
    """`n` distinct tokens, told apart from another name's."""
    return [f"{name}{i}" for i in range(n)]


def served(cache: PrefixCache, prompt: list[str], answer: tuple[str, ...] = ()) -> int:
    """One request start to end; the prompt tokens it found cached."""
    lease = cache.admit(prompt, len(prompt) + len(answer))
    cache.finish(lease, [*prompt, *answer])
    return lease.hit_tokens


# -- the cache itself -------------------------------------------------------------------------


def test_a_block_hits_only_when_everything_before_it_is_cached():
    cache = PrefixCache(block_size=4, capacity_blocks=100)
    first, second, other = seq("a", 4), seq("b", 4), seq("c", 4)
    assert served(cache, [*first, *second, "end"]) == 0
    # the same second block behind another first block: its hash chains the parent, no hit
    assert served(cache, [*other, *second, "end"]) == 0
    assert served(cache, [*first, *other, "end"]) == 4
    assert served(cache, [*first, *second, "more", "end"]) == 8


def test_only_full_blocks_are_cached_and_the_last_prompt_token_is_always_computed():
    cache = PrefixCache(block_size=16, capacity_blocks=100)
    prompt = seq("p", 20)  # one full block and 4 tokens of a second
    assert served(cache, prompt) == 0
    # the 4 tokens of the partial block were not cached: only the first block hits
    assert served(cache, [*prompt, *seq("q", 30)]) == 16
    exact = seq("x", 32)
    served(cache, exact)
    # a repeat of a 32-token prompt reuses 31 tokens at most: one whole block
    assert served(cache, exact) == 16
    assert cache.cached_prefix_tokens([*exact, "next"]) == 32


def test_an_answers_full_blocks_are_cached_for_the_next_turn():
    cache = PrefixCache(block_size=4, capacity_blocks=100)
    prompt, answer = seq("p", 6), seq("a", 7)
    lease = cache.admit(prompt, len(prompt) + len(answer))
    cache.finish(lease, [*prompt, *answer[:-1]])  # the last sampled token is never computed
    next_turn = [*prompt, *answer, *seq("tool", 5)]
    # prompt + 6 computed answer tokens = 12 tokens = 3 full blocks
    assert cache.cached_prefix_tokens(next_turn) == 12


def test_blocks_no_request_holds_are_evicted_least_recently_used_first():
    # room for two requests' two full blocks, and the partial block ("end") of the one running,
    # which is its own and not kept
    cache = PrefixCache(block_size=4, capacity_blocks=5)
    a, b, c = [*seq("a", 8), "end"], [*seq("b", 8), "end"], [*seq("c", 8), "end"]
    served(cache, a)
    served(cache, b)
    assert cache.cached_blocks == 4
    assert served(cache, a) == 8  # a is now the more recent: b goes first
    assert served(cache, c) == 0
    assert cache.cached_prefix_tokens(b) == 0
    assert cache.cached_prefix_tokens(a) == 8
    assert cache.cached_blocks == 4


def test_of_one_requests_blocks_the_tail_is_evicted_first():
    cache = PrefixCache(block_size=4, capacity_blocks=3)
    a = [*seq("a", 8), "end"]
    served(cache, a)
    # a new request needing 2 blocks leaves room for one of a's two: the first one stays
    served(cache, [*seq("b", 4), "end"])
    assert cache.cached_prefix_tokens(a) == 4


def test_a_running_requests_blocks_are_never_evicted():
    cache = PrefixCache(block_size=4, capacity_blocks=4)
    running = [*seq("r", 8), "end"]
    lease = cache.admit(running, len(running) + 3)  # 3 blocks: 2 cached, 1 its own
    for n in range(5):  # others come and go, more than the pool holds
        served(cache, [*seq(f"o{n}", 8), "end"])
    assert cache.cached_prefix_tokens(running) == 8
    assert served(cache, running) == 8  # a request arriving meanwhile hits what it cached
    cache.finish(lease, running)
    assert cache.blocks_in_use == 0


def test_usage_counts_blocks_in_use_and_a_shared_block_once():
    cache = PrefixCache(block_size=4, capacity_blocks=10)
    shared = seq("s", 8)
    first = cache.admit([*shared, "x"], 9)  # 2 full blocks + 1 partial = 3
    second = cache.admit([*shared, "y"], 12)  # hits the 2 shared, 1 more of its own
    assert (first.hit_tokens, second.hit_tokens) == (0, 8)
    assert cache.blocks_in_use == 2 + 1 + 1
    assert cache.usage() == pytest.approx(0.4)
    cache.finish(first, [*shared, "x"])
    cache.finish(second, [*shared, "y"])
    assert cache.blocks_in_use == 0 and cache.usage() == 0
    assert cache.cached_blocks == 2  # kept for later requests


def test_usage_is_capped_at_one_when_running_requests_hold_more_than_the_pool():
    cache = PrefixCache(block_size=4, capacity_blocks=2)
    lease = cache.admit(seq("a", 8), 40)
    assert cache.usage() == 1.0
    cache.finish(lease, seq("a", 8))
    assert cache.usage() == 0


@pytest.mark.parametrize(("block_size", "capacity"), [(0, 10), (4, 0)])
def test_a_cache_without_a_block_is_refused(block_size, capacity):
    with pytest.raises(ValueError, match="block"):
        PrefixCache(block_size, capacity)


# -- the token sequence the cache hashes --------------------------------------------------------

CHATS = [
    ([{"role": "user", "content": SEED_REQUEST}], LEAVE_TOOLS),
    ([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello  "}], LEAVE_TOOLS),
    (
        [
            {"role": "developer", "content": [{"type": "text", "text": "be brief "}]},
            {"role": "user", "content": "請查 2026-03-02 的假"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search_leaves", "arguments": '{"keyword": "特休"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '[{"id": "LV-1"}]'},
            {"role": "assistant", "content": "   "},
        ],
        [],
    ),
]


@pytest.mark.parametrize(("messages", "tools"), CHATS)
def test_the_hashed_sequence_is_the_one_the_usage_counts(messages, tools):
    assert len(prompt_tokens(messages, tools)) == tokens.prompt_tokens(messages, tools)


def test_a_turns_prompt_and_answer_are_the_start_of_the_next_turns_prompt():
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SEED_REQUEST}]
    arguments = '{"keyword": "家庭旅遊"}'
    answer = answer_tokens("", [("search_leaves", arguments)], stopped=True)
    function = {"name": "search_leaves", "arguments": arguments}
    call = {"id": "c1", "type": "function", "function": function}
    next_turn = [
        *turn,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "[]"},
    ]
    first = prompt_tokens(turn, LEAVE_TOOLS)
    second = prompt_tokens(next_turn, LEAVE_TOOLS)
    assert second[: len(first) + len(answer)] == first + answer


# -- through the simulator process --------------------------------------------------------------


def chat(http: httpx.Client, messages: list[dict], **extra) -> tuple[dict, dict[str, float]]:
    """One request; its answer and the deltas of the prefix-cache and prefill metrics."""
    names = (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:request_prefill_time_seconds_sum",
        "vllm:iteration_tokens_total_sum",
    )
    before = http.get("/metrics").text
    body = {"model": "leave-copilot", "messages": messages, "tools": LEAVE_TOOLS, **extra}
    answer = http.post("/v1/chat/completions", json=body).raise_for_status().json()
    after = http.get("/metrics").text
    return answer, {
        name.removeprefix("vllm:"): sample_value(after, name) - sample_value(before, name)
        for name in names
    }


def next_turn(messages: list[dict], answer: dict, result: str) -> list[dict]:
    message = answer["choices"][0]["message"]
    calls = message["tool_calls"]
    assistant = {"role": "assistant", "content": message["content"], "tool_calls": calls}
    replies = [{"role": "tool", "tool_call_id": c["id"], "content": result} for c in calls]
    return [*messages, assistant, *replies]


@pytest.fixture(scope="module")
def timed_sim(tmp_path_factory):
    """Prefill of 1 ms per uncached token and nothing else, so its time counts tokens."""
    with model_simulator(
        tmp_path_factory.mktemp("sim"),
        prefill_overhead_ms="0",
        prefill_per_token_ms="1",
        itl_ms="0",
        block_size="16",
    ) as base:
        yield base


def test_a_sessions_second_turn_hits_most_of_its_prompt_and_an_unrelated_prompt_does_not(
    timed_sim,
):
    system = f"{SYSTEM}（{uuid.uuid4().hex}）"  # no earlier request shares its first block
    first = [{"role": "system", "content": system}, {"role": "user", "content": SEED_REQUEST}]
    with httpx.Client(base_url=timed_sim) as http:
        answer, one = chat(http, first)
        assert answer["choices"][0]["message"]["tool_calls"], answer  # the policy searches
        second = next_turn(first, answer, '{"leaves": [], "total": 0}')
        _, two = chat(http, second)
        unrelated = [
            {"role": "system", "content": f"另一個助手（{uuid.uuid4().hex}）"},
            {"role": "user", "content": SEED_REQUEST},
        ]
        _, three = chat(http, unrelated)
    prompt_one = answer["usage"]["prompt_tokens"]
    assert one["prefix_cache_queries_total"] == prompt_one
    assert one["prefix_cache_hits_total"] == 0
    # the first turn's prompt and its answer, in whole blocks (all but the answer's last token)
    message = answer["choices"][0]["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    reused = prompt_one + len(answer_tokens(message["content"] or "", calls, stopped=True)) - 1
    hits, queries = two["prefix_cache_hits_total"], two["prefix_cache_queries_total"]
    print(f"\nsecond turn: {hits:.0f} of {queries:.0f} prompt tokens cached")
    assert hits == reused // 16 * 16
    assert hits > 0.75 * queries
    assert three["prefix_cache_hits_total"] == 0
    # prefill is paid only for the tokens not cached (1 ms each here), and so is the step
    for deltas in (one, two, three):
        uncached = deltas["prefix_cache_queries_total"] - deltas["prefix_cache_hits_total"]
        assert deltas["request_prefill_time_seconds_sum"] == pytest.approx(uncached / 1000)
        generated = deltas["iteration_tokens_total_sum"] - uncached
        assert generated >= 1


def test_cache_config_info_reports_the_configured_block_size(start_simulator):
    with start_simulator(profile="instant", block_size="128", kv_cache_tokens="10000") as base:
        page = httpx.get(f"{base}/metrics").text
    (labels,) = (
        sample.labels
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "vllm:cache_config_info"
    )
    assert labels["block_size"] == labels["effective_attention_block_size"] == "128"
    assert labels["num_gpu_blocks"] == str(10000 // 128)
    assert labels["user_specified_block_size"] == "True"
