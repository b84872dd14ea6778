"""vLLM's automatic prefix caching, modelled on KV blocks (vllm/v1/core/kv_cache_manager.py,
block_pool.py and kv_cache_utils.py at 0.32).

- A sequence is cut into blocks of `block_size` tokens; only full blocks are hashed, and each
  block's hash chains its parent's, so a block hits only if everything before it is cached too.
- A request reuses the longest run of cached blocks its prompt starts with, but never its last
  prompt token (the model needs one input to sample from): at most (prompt − 1) // block_size
  blocks hit.
- Its own full prompt blocks are cached as it is admitted (vLLM caches a block when it is
  allocated), so a request arriving while it runs hits them; the full blocks of its answer join
  when it ends (vLLM caches decode blocks too).
- The pool holds `capacity` blocks. A block held by a running request is never evicted; when a
  request needs blocks and none is free, the cached blocks no request holds are evicted least
  recently used first, and of one request's blocks the tail goes first (vLLM frees in reverse).

Hashes are Python's own over (parent, tokens): vLLM uses SHA-256, which matters across
processes and against collisions an attacker can aim for; neither applies to a simulation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass
class Lease:
    """What a running request holds: a reference on each of its full prompt blocks, which the
    cache names, and blocks of its own for the rest (the partial block, the answer)."""

    prompt_hashes: list[int]
    private: int
    hit_tokens: int  # prompt tokens found in the cache on admission


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        if block_size < 1:
            raise ValueError(f"block size must be at least 1, got {block_size}")
        if capacity_blocks < 1:
            raise ValueError(f"the KV cache must hold at least one block, got {capacity_blocks}")
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._refs: dict[int, int] = {}  # cached block → running requests holding it
        self._free: OrderedDict[int, None] = OrderedDict()  # held by none, least recent first
        self._private = 0

    @property
    def blocks_in_use(self) -> int:
        return len(self._refs) - len(self._free) + self._private

    @property
    def cached_blocks(self) -> int:
        return len(self._refs)

    def usage(self) -> float:
        """`vllm:kv_cache_usage_perc`: blocks held by running requests / the pool."""
        return min(self.blocks_in_use / self.capacity, 1.0)

    def block_hashes(self, sequence: Sequence[Hashable], known: Sequence[int] = ()) -> list[int]:
        """The chained hash of every full block of `sequence`; `known` are those of its first
        blocks, already computed."""
        size = self.block_size
        hashes = list(known)
        parent = hashes[-1] if hashes else None
        for start in range(len(hashes) * size, len(sequence) - size + 1, size):
            parent = hash((parent, tuple(sequence[start : start + size])))
            hashes.append(parent)
        return hashes

    def cached_prefix_tokens(self, prompt: Sequence[Hashable]) -> int:
        """How many of `prompt`'s tokens a request admitted now would find cached."""
        return self._hits(self.block_hashes(prompt), len(prompt)) * self.block_size

    def admit(self, prompt: Sequence[Hashable], kv_tokens: int) -> Lease:
        """Look `prompt` up and take the blocks a request of `kv_tokens` (prompt + completion)
        holds while it runs."""
        hashes = self.block_hashes(prompt)
        hit = self._hits(hashes, len(prompt))
        for block in hashes:
            self._hold(block)
        private = max(-(-kv_tokens // self.block_size) - len(hashes), 0)
        self._private += private
        self._fit()
        return Lease(hashes, private, hit * self.block_size)

    def finish(self, lease: Lease, computed: Sequence[Hashable]) -> None:
        """The request ends: `computed` is its prompt followed by the answer tokens whose KV
        was computed. The answer's full blocks join the cache; all the request's blocks become
        evictable, its tail first."""
        blocks = self.block_hashes(computed, lease.prompt_hashes)
        for block in blocks[len(lease.prompt_hashes) :]:
            self._hold(block)
        self._private -= lease.private
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None
        self._fit()

    def _hits(self, hashes: list[int], prompt_tokens: int) -> int:
        hit = 0
        for block in hashes[: max(prompt_tokens - 1, 0) // self.block_size]:
            if block not in self._refs:
                break
            hit += 1
        return hit

    def _hold(self, block: int) -> None:
        # A block already cached (the last prompt block, which no lookup reuses; an answer
        # seen before) is shared: vLLM would hold a duplicate, one block more in use.
        held = self._refs.get(block)
        if held is None:
            self._refs[block] = 1
            return
        if held == 0:
            del self._free[block]
        self._refs[block] = held + 1

    def _fit(self) -> None:
        """Evict unheld cached blocks, least recently used first, until the pool holds them."""
        while self._free and len(self._refs) + self._private > self.capacity:
            block, _ = self._free.popitem(last=False)
            del self._refs[block]
