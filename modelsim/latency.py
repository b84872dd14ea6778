"""The latency model: profiles, and a scheduler with vLLM's running/waiting semantics.

    load_factor(n)  = 1 + slowdown_per_running × (n − 1)          n = requests running now
    prefill         = (prefill_overhead + uncached_tokens × prefill_per_token) × load_factor(n)
    TTFT            = queue_wait + prefill
    token i (i ≥ 1) is emitted one ITL after token i − 1, ITL = itl × load_factor(n)
    e2e             = TTFT + (output_tokens − 1) × ITL

At most `max_num_seqs` requests run; the rest wait in FIFO order, which is what
`vllm:num_requests_waiting` and `vllm:request_queue_time_seconds` show. `uncached_tokens` is
the prompt less what the prefix cache (modelsim/prefix_cache.py) holds. Every delay gets an
optional ± `jitter` fraction from a seeded generator.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, replace

from .gpu import BusyClock
from .settings import SimSettings


@dataclass(frozen=True)
class Profile:
    """Delays in milliseconds. A model of a GPU, not a measurement of one."""

    prefill_overhead_ms: float
    prefill_per_token_ms: float
    itl_ms: float
    slowdown_per_running: float
    max_num_seqs: int
    kv_cache_tokens: int


# A fine-tuned 8B dense model in bf16 on one H200 (see docs/simulator.md, "Latency model"):
# batch-1 decode ≈ 200–240 tok/s → ITL 4 ms; aggregate decode ≈ 7.6k tok/s at batch 32 and
# ≈ 33k at 256 → per-stream ITL ≈ 4.2 ms and ≈ 7.8 ms → +0.015 ms per running request
# (0.015 / 4.0 = 0.00375 per request); prefill ≈ 28k prompt tok/s → 0.035 ms per token;
# 15 ms of scheduling, tokenisation and HTTP overhead; vLLM's default max_num_seqs of 256;
# KV cache ≈ 0.9 × 141 GB − 16 GB weights ≈ 111 GB / 128 KiB per token ≈ 850k tokens.
PROFILES = {
    "gpu": Profile(15.0, 0.035, 4.0, 0.00375, 256, 850_000),
    "instant": Profile(0.0, 0.0, 0.0, 0.0, 1024, 850_000),
}


def profile_from(settings: SimSettings) -> Profile:
    base = PROFILES[settings.profile]
    overrides = {
        name: getattr(settings, name)
        for name in Profile.__dataclass_fields__
        if getattr(settings, name, None) is not None
    }
    return replace(base, **overrides)


class Scheduler:
    """Admits up to `max_num_seqs` requests; the others wait in arrival order."""

    def __init__(self, profile: Profile, jitter: float = 0.0, seed: int | None = None) -> None:
        self.profile = profile
        self.running = 0
        self.clock = BusyClock()  # for the simulated GPU's activity figures
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._jitter = jitter
        self._random = random.Random(seed)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def instant(self) -> bool:
        p = self.profile
        return p.prefill_overhead_ms == p.prefill_per_token_ms == p.itl_ms == 0

    async def admit(self) -> bool:
        """Take a slot, waiting in FIFO order if none is free; True if the request had to wait."""
        waited = False
        if self.running >= self.profile.max_num_seqs or self._waiters:
            waited = True
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._release_slot()  # admitted as we were cancelled: pass it on
                raise
        else:
            self.running += 1
            self.clock.update(self.running)
        return waited

    def release(self) -> None:
        self._release_slot()

    def _release_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next waiter
                return
        self.running -= 1
        self.clock.update(self.running)

    def load_factor(self) -> float:
        return 1.0 + self.profile.slowdown_per_running * max(self.running - 1, 0)

    def prefill_seconds(self, uncached_tokens: int) -> float:
        """The prefill of a prompt of which `uncached_tokens` are not in the prefix cache."""
        p = self.profile
        ms = (p.prefill_overhead_ms + uncached_tokens * p.prefill_per_token_ms) * self.load_factor()
        return self._jittered(ms / 1000.0)

    def itl_seconds(self) -> float:
        return self._jittered(self.profile.itl_ms * self.load_factor() / 1000.0)

    def _jittered(self, seconds: float) -> float:
        if not self._jitter or not seconds:
            return seconds
        return seconds * (1.0 + self._random.uniform(-self._jitter, self._jitter))
