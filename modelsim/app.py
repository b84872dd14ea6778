"""The simulator's HTTP API: vLLM's OpenAI-compatible routes, /health and /metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from opentelemetry.context import Context
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from common import sse

from . import generate as gen
from . import policy, tracing
from .errors import ApiError
from .gpu import SimulatedGpuCollector
from .latency import Scheduler, profile_from
from .metrics import VllmMetrics, observe_repeated, prompt_sources
from .prefix_cache import Lease, PrefixCache
from .prompt import answer_tokens
from .request import ChatRequest, parse
from .settings import SimSettings

logger = logging.getLogger("modelsim")
VLLM_VERSION = "0.32.0"  # the vLLM whose API this simulates (tests/fixtures/vllm-0.32/)
FINGERPRINT = f"vllm-{VLLM_VERSION}-modelsim"
# Who serves: on /version and as each model's owner, so that a load test or a cost report can
# tell a simulated capacity from a GPU's (vLLM answers {"version": …} and "owned_by": "vllm").
SIMULATOR = "modelsim"
FAULT_HEADER = "x-sim-fault"
LONG_SLEEP_SECONDS = 0.004
SLEEP_MARGIN_SECONDS = 0.002


class Simulator:
    """Holds the scheduler, metrics and settings; one per app."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self.profile = profile_from(settings)
        self.scheduler = Scheduler(self.profile, settings.jitter, settings.seed)
        self.prefix_cache = PrefixCache(
            settings.block_size, self.profile.kv_cache_tokens // settings.block_size
        )
        self.metrics = VllmMetrics(
            settings.model,
            settings.max_model_len,
            self.profile.kv_cache_tokens,
            settings.block_size,
            user_specified_block_size="block_size" in settings.model_fields_set,
        )
        self.metrics.bind_gauges(
            lambda: self.scheduler.running,
            lambda: self.scheduler.waiting,
            self.prefix_cache.usage,
        )
        self.metrics.registry.register(
            SimulatedGpuCollector(self.scheduler.clock, settings.gpu_ids)
        )
        self.traced = settings.otlp_traces_endpoint is not None
        self.default_faults = gen.parse_faults(settings.fault)
        self._fault_random = random.Random(settings.seed)
        self.created = int(time.time())
        # line-buffered: a reader sees every finished request, the simulator still running
        self._timing_log = (
            settings.timing_log.open("a", buffering=1, encoding="utf-8")
            if settings.timing_log
            else None
        )

    # -- routes ---------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        arrival = time.perf_counter()
        try:
            chat = parse(
                await request.body(),
                strict=self.settings.validation == "strict",
                max_model_len=self.settings.max_model_len,
            )
            if chat.model != self.settings.model:
                raise ApiError(
                    404,
                    f"The model `{chat.model}` does not exist. Available models: "
                    f"{self.settings.model}",
                    "NotFoundError",
                    "model",
                )
            faults = self._faults(request, chat)
            await self._request_faults(faults)
            output = gen.generate(chat, faults)
        except ApiError as error:
            self._count_http(error.status)
            return error.response()
        self._count_http(200)
        parent = tracing.incoming(request.headers) if self.traced else None
        if chat.stream:
            return StreamingResponse(
                self._stream(chat, output, arrival, parent), media_type="text/event-stream"
            )
        return await self._complete(chat, output, arrival, parent)

    async def models(self, _: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.settings.model,
                        "object": "model",
                        "created": self.created,
                        "owned_by": SIMULATOR,
                        "root": self.settings.model_root or self.settings.model,
                        "parent": None,
                        "max_model_len": self.settings.max_model_len,
                        "permission": [],
                    }
                ],
            }
        )

    async def version(self, _: Request) -> Response:
        """vLLM's GET /version, and what a vLLM never says: that this is a simulator."""
        return JSONResponse(
            {
                "version": VLLM_VERSION,
                "simulator": SIMULATOR,
                "profile": self.settings.profile,
                "note": "a simulator of vLLM's API: its latencies and GPU figures are a model, "
                "not a measurement",
            }
        )

    async def health(self, _: Request) -> Response:
        return Response(status_code=200)

    async def prometheus(self, _: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # -- generation -----------------------------------------------------------------------

    async def _complete(
        self, chat: ChatRequest, output: gen.Output, arrival: float, parent: Context | None
    ) -> Response:
        timing = _Timing(arrival)
        completion_id = f"chatcmpl-{secrets.token_hex(8)}"
        lease = await self._admit(chat, output, timing)
        generated = 0
        try:
            await self._until(timing.first_token)
            deadline = timing.first_token
            timing.first_token = time.perf_counter()  # as produced, so a late wake-up shows
            for i in range(1, output.completion_tokens):
                gap = self.scheduler.itl_seconds()
                timing.gaps.append(gap)
                deadline += gap
                if i % 8 == 0:  # sleep in chunks: the load factor may change meanwhile
                    await self._until(deadline)
            await self._until(deadline)
            generated = output.completion_tokens
        finally:
            self._release(chat, output, lease, generated)
        timing.finished = time.perf_counter()
        self._observe(chat, output, timing, output.finish_reason, lease)
        self._trace(parent, completion_id, chat, timing)
        self.metrics.parser_invocation(False, bool(output.calls))
        message: dict[str, Any] = {
            "role": "assistant",
            "content": output.content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in output.calls
            ],
            "reasoning": None,
        }
        body = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": output.finish_reason,
                    "stop_reason": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": FINGERPRINT,
            "usage": _usage(chat, output),
        }
        return Response(json.dumps(body, ensure_ascii=False), media_type="application/json")

    async def _stream(
        self, chat: ChatRequest, output: gen.Output, arrival: float, parent: Context | None
    ) -> AsyncIterator[bytes]:
        timing = _Timing(arrival)
        completion_id = f"chatcmpl-{secrets.token_hex(8)}"
        head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": chat.model,
        }
        finish_reason = "abort"
        lease = await self._admit(chat, output, timing)
        try:
            await self._until(timing.first_token)
            deadline = timing.first_token
            timing.first_token = time.perf_counter()  # as produced, so a late wake-up shows
            produced = timing.first_token
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            yield _sse({**head, "choices": [{**first, "finish_reason": None}]})
            last = len(output.pieces) - 1
            for i, piece in enumerate(output.pieces):
                if i:
                    deadline += self.scheduler.itl_seconds()
                    await self._until(deadline)
                    # the gap as produced (vLLM stamps its own iterations), not as planned
                    now = time.perf_counter()
                    timing.gaps.append(now - produced)
                    produced = now
                ends_text = i == last and piece.kind == "text"
                choice = {
                    "index": 0,
                    "delta": _delta(piece, output),
                    "logprobs": None,
                    "finish_reason": output.finish_reason if ends_text else None,
                    "token_ids": None,
                }
                if ends_text:
                    choice["stop_reason"] = None
                yield _sse({**head, "choices": [choice]})
                self.metrics.parser_invocation(True, piece.kind != "text")
            if output.pieces[-1].kind != "text":
                end = {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": output.finish_reason,
                    "stop_reason": None,
                    "token_ids": None,
                }
                yield _sse({**head, "choices": [end]})
            finish_reason = output.finish_reason
            if chat.include_usage:
                usage = {**head, "choices": [], "usage": _usage(chat, output)}
                yield _sse({**usage, "system_fingerprint": FINGERPRINT})
            yield sse.DONE_FRAME
        finally:
            timing.finished = time.perf_counter()
            self._release(chat, output, lease, _generated(timing))
            self._observe(chat, output, timing, finish_reason, lease)
            self._trace(parent, completion_id, chat, timing)
            if self._timing_log is not None and finish_reason != "abort":
                self._log_timing(timing, completion_id)

    async def _admit(self, chat: ChatRequest, output: gen.Output, timing: _Timing) -> Lease:
        waited = await self.scheduler.admit()
        # Looked up as it is scheduled, as vLLM does: a request that waited finds what the
        # requests before it cached meanwhile. Its KV is held for its whole completion at once.
        lease = self.prefix_cache.admit(
            chat.prompt_ids, chat.prompt_tokens + output.completion_tokens
        )
        # A request that found a free slot starts prefill at arrival: the simulator's own
        # parsing and response set-up are part of the simulated prefill, not added to it.
        timing.admitted = time.perf_counter() if waited else timing.arrival
        timing.prefill = self.scheduler.prefill_seconds(chat.prompt_tokens - lease.hit_tokens)
        timing.first_token = timing.admitted + timing.prefill
        return lease

    def _release(self, chat: ChatRequest, output: gen.Output, lease: Lease, generated: int) -> None:
        self.scheduler.release()
        answer = answer_tokens(
            output.content,
            [(call.name, call.arguments) for call in output.calls],
            stopped=output.finish_reason != "length",
        )
        # The last token sampled is never fed back, so its KV is never computed; an answer cut
        # short (a client that left) computed as many as it produced, less that last one.
        computed = len(answer) if generated >= output.completion_tokens else generated
        self.prefix_cache.finish(lease, chat.prompt_ids + answer[: max(computed - 1, 0)])

    async def _until(self, deadline: float) -> None:
        # Absolute deadlines: sleep overshoot does not add up over many tokens. A long sleep
        # wakes 1–2 ms late on an idle machine, so it stops short and a short sleep finishes.
        delay = deadline - time.perf_counter()
        if delay > LONG_SLEEP_SECONDS:
            await asyncio.sleep(delay - SLEEP_MARGIN_SECONDS)
            delay = deadline - time.perf_counter()
        # asyncio may wake a timer up to its clock resolution early; a token is never early
        while delay > 0:
            await asyncio.sleep(delay)
            delay = deadline - time.perf_counter()

    async def _request_faults(self, faults: set[str]) -> None:
        if "http_500" in faults:
            raise ApiError(500, "Simulated internal server error", "InternalServerError")
        if "http_429" in faults:
            seconds = self.settings.retry_after_seconds
            raise ApiError(
                429,
                "Simulated rate limit: too many requests",
                "RateLimitError",
                headers={"Retry-After": str(seconds)},
            )
        if "stall" in faults:
            await asyncio.sleep(self.settings.stall_seconds)

    def _faults(self, request: Request, chat: ChatRequest) -> set[str]:
        """The header wins, then a `[sim-fault:…]` tag in the request, then SIM_FAULT."""
        header = request.headers.get(FAULT_HEADER)
        if header is not None:
            return gen.parse_faults(header)
        tagged = policy.requested_faults(chat.messages)
        if tagged:
            return gen.parse_faults(tagged)
        if self.default_faults and self._fault_random.random() < self.settings.fault_rate:
            return set(self.default_faults)
        return set()

    # -- metrics --------------------------------------------------------------------------

    def _observe(
        self,
        chat: ChatRequest,
        output: gen.Output,
        timing: _Timing,
        finish_reason: str,
        lease: Lease,
    ) -> None:
        m, child = self.metrics, self.metrics.child
        generated = _generated(timing)
        # The engine finishes a tool call like any other stop; "tool_calls" is an API-level name.
        engine_reason = "stop" if finish_reason == "tool_calls" else finish_reason
        m.success.labels(m.model_name, "0", engine_reason).inc()
        child(m.prompt_tokens).inc(chat.prompt_tokens)
        child(m.generation_tokens).inc(generated)
        child(m.prompt_hist).observe(chat.prompt_tokens)
        child(m.generation_hist).observe(generated)
        child(m.max_tokens_hist).observe(
            chat.max_tokens or self.settings.max_model_len - chat.prompt_tokens
        )
        child(m.prefix_queries).inc(chat.prompt_tokens)
        sources = prompt_sources(chat.prompt_tokens, lease.hit_tokens)
        child(m.prefix_hits).inc(sources.cached)
        child(m.prompt_cached).inc(sources.cached)
        # the simulated prefix cache is the GPU's own: every hit is a `device` hit
        m.by_source(m.prompt_cached_by_source, "device").inc(sources.cached)
        m.by_source(m.prompt_by_source, "local_compute").inc(sources.local_compute)
        m.by_source(m.prompt_by_source, "local_cache_hit").inc(sources.local_cache_hit)
        child(m.prefill_kv_hist).observe(sources.local_compute)
        child(m.n_hist).observe(1)  # one choice per request: `n` is not read
        child(m.request_preemptions).observe(0)  # the scheduler never preempts
        child(m.max_generation_hist).observe(generated)  # with n = 1, the one sequence's
        if generated:
            # No shared engine steps here: each request counts as if it ran alone, a step for
            # its prefill (the prompt tokens not cached and the first token) then one per later
            # token. The sum is exact; under concurrency vLLM has fewer, larger steps.
            iteration = child(m.iteration_tokens)
            iteration.observe(sources.local_compute + 1)
            observe_repeated(iteration, 1, generated - 1)
        queue = timing.admitted - timing.arrival
        child(m.queue).observe(queue)
        child(m.e2e).observe(timing.finished - timing.arrival)
        child(m.inference).observe(timing.finished - timing.admitted)
        child(m.prefill).observe(timing.prefill)
        if generated:
            child(m.ttft).observe(timing.first_token - timing.arrival)
            decode = max(timing.finished - timing.first_token, 0.0)
            child(m.decode).observe(decode)
            itl = child(m.itl)
            for gap in timing.gaps:
                itl.observe(gap)
            if generated > 1:
                child(m.tpot).observe(decode / (generated - 1))

    def _trace(
        self, parent: Context | None, completion_id: str, chat: ChatRequest, timing: _Timing
    ) -> None:
        if self.traced:
            tracing.record(
                parent,
                request_id=completion_id,
                model=chat.model,
                max_tokens=chat.max_tokens,
                prompt_tokens=chat.prompt_tokens,
                completion_tokens=_generated(timing),
                arrival=timing.arrival,
                admitted=timing.admitted,
                first_token=timing.first_token,
                finished=timing.finished,
            )

    def close(self) -> None:
        if self._timing_log is not None:
            self._timing_log.close()

    def _log_timing(self, timing: _Timing, completion_id: str) -> None:
        assert self._timing_log is not None
        line = {
            "id": completion_id,  # the stream's chunks carry it: a client's record pairs by it
            "ttft_s": timing.first_token - timing.arrival,
            "itl_s": timing.gaps,
            "e2e_s": timing.finished - timing.arrival,
        }
        self._timing_log.write(json.dumps(line) + "\n")

    def _count_http(self, status: int) -> None:
        self.metrics.http_requests.labels(
            "/v1/chat/completions", "POST", f"{status // 100}xx"
        ).inc()


class _Timing:
    __slots__ = ("admitted", "arrival", "finished", "first_token", "gaps", "prefill")

    def __init__(self, arrival: float) -> None:
        self.arrival = arrival
        self.admitted = arrival
        self.first_token = arrival
        self.prefill = 0.0
        self.finished = 0.0
        self.gaps: list[float] = []


def _generated(timing: _Timing) -> int:
    """Tokens produced by the time the request ended (none if it ended before its first)."""
    return 1 + len(timing.gaps) if timing.finished >= timing.first_token else 0


def _usage(chat: ChatRequest, output: gen.Output) -> dict[str, int]:
    return {
        "prompt_tokens": chat.prompt_tokens,
        "total_tokens": chat.prompt_tokens + output.completion_tokens,
        "completion_tokens": output.completion_tokens,
    }


def _delta(piece: gen.Piece, output: gen.Output) -> dict[str, Any]:
    if piece.kind == "text":
        return {"content": piece.value}
    if piece.kind == "tool_start":
        call = output.calls[piece.index]
        return {
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "index": piece.index,
                    "function": {"name": call.name},
                }
            ],
        }
    return {
        "content": None,
        "tool_calls": [{"index": piece.index, "function": {"arguments": piece.value}}],
    }


def _sse(data: dict[str, Any]) -> bytes:
    return sse.frame(data, compact=True)  # vLLM's chunks have no spaces


WARM_UP_REQUEST = json.dumps(
    {"model": "warm-up", "messages": [{"role": "user", "content": "warm up"}], "stream": True}
).encode()


async def warm_up(simulator: Simulator) -> None:
    """Pay the one-off costs before the first client does, so its latency is the modelled one.

    Starlette's streaming response opens an anyio task group, and anyio imports its asyncio
    backend on first use (~50–70 ms); parsing and the policy compile regexes on first use.
    """
    async with anyio.create_task_group():
        pass
    chat = parse(WARM_UP_REQUEST, strict=False, max_model_len=simulator.settings.max_model_len)
    gen.generate(chat, set())


def create_app(settings: SimSettings | None = None) -> Starlette:
    simulator = Simulator(settings or SimSettings())

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await warm_up(simulator)
        yield
        simulator.close()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/chat/completions", simulator.chat_completions, methods=["POST"]),
            Route("/v1/models", simulator.models, methods=["GET"]),
            Route("/health", simulator.health, methods=["GET"]),
            Route("/version", simulator.version, methods=["GET"]),
            Route("/metrics", simulator.prometheus, methods=["GET"]),
        ],
    )
    app.state.simulator = simulator
    return app
