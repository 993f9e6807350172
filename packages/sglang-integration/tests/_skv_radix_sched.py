"""SGLang 0.5.23's scheduler-side KV bookkeeping of a sharded prefill node, driven as its scheduler
drives it, so the backend suite's pages and locations come from SGLang alone.

Real, as shipped: ``PageInterleavePoolAllocator`` (the allocator SGLang builds when KV sharding is
on, ``kv_cache_configurator.py``), ``UnifiedRadixCache`` (built as ``create_unified_radix_cache``
builds it: one FULL component, its default tree core), ``ReqToTokenPool``, ``Req``, and the
scheduler's own functions: ``Req.init_next_round_input`` (the radix match, capped at
``len - 1``), ``tree_cache.lock`` at admission, ``ScheduleBatch.prepare_for_extend``
(``alloc_for_extend``: eviction down to the min-class floor, the rotation bases, the class pops,
``write_cache_indices``), ``checkpoint_kv_cache`` between chunks, ``release_kv_cache`` with a
checkpoint at finish and without one for an abort (``prepare_abort`` first, as the prefill
node's ``_retire_aborted_prefill_result`` does). ``need_sort`` and EAGLE's bigram keys follow the
deployment's resolved arguments. Nothing here computes a page or a location.

What the driver adds is bookkeeping for the checks: each request's *content* per position (the
admission-order id of the first request whose prompt shares the whole prefix up to it: two
positions hold the same KV exactly when their prefixes agree), the tokens each step evicted,
and which pages a step took that earlier held other content (re-use after a free or an eviction).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from _skv_backend_model import BatchRow


@dataclass
class Tracked:
    """A request as the backend suite's forwards see it (``BatchRow.req``): its name, its
    ``req_to_token`` row (SGLang's ``req_pool_idx``) and the content id of each position."""

    name: str
    uid: int
    tokens: tuple[int, ...]
    contents: list[int]
    req: Any  # SGLang's Req
    row: int = -1

    def content(self, pos: int) -> int:
        return self.contents[pos]


@dataclass
class Scheduled:
    """One step's batch as SGLang scheduled it.

    Attributes:
        rows: the batch (prefix and extend lengths from the ``Req`` s, rows from the pool).
        out_cache_loc: (T,) what ``prepare_for_extend`` allocated, request-major.
        pages: per request, its logical page of every position-page (from ``req_to_token``).
        evicted: tokens the radix cache evicted while this batch was allocated.
        evicted_pages: the pages that eviction freed (free after it, or taken by the batch).
        reused: ``(page, request)`` of every new page that held other content before.
        bases: per request, the chain's rotation base SGLang's allocator resolved.
    """

    rows: list[BatchRow]
    out_cache_loc: torch.Tensor
    pages: list[list[int]]
    evicted: int
    evicted_pages: list[int]
    reused: list[tuple[int, str]]
    bases: list[int | None]


@dataclass
class Scheduler:
    """SGLang's allocator, radix cache and request-to-token pool of one rank (every rank of the
    shard group builds its own; SGLang's mirrored allocation makes them agree)."""

    shard_size: int
    local_pages: int
    page_size: int
    model_config: Any
    spec_algorithm: Any
    need_sort: bool
    eviction_policy: str = "lru"  # the server's --radix-eviction-policy
    #: the KV pool the allocator serves (SGLang passes the pool it built)
    kvcache: Any = None
    #: the request-to-token pool (built here when None), shared with the attention backends
    r2t: Any = None
    max_requests: int = 16
    context_len: int = 4096
    requests: dict[str, Tracked] = field(default_factory=dict)
    #: logical page -> content ids of the rows last written there
    written: dict[int, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        if self.r2t is None:
            self.r2t = ReqToTokenPool(size=self.max_requests, max_context_len=self.context_len,
                                      device="cpu", enable_memory_saver=False)  # fmt: skip
        self.allocator = PageInterleavePoolAllocator(
            self.local_pages * self.page_size, physical_page_size=self.page_size,
            shard_size=self.shard_size, dtype=torch.bfloat16, device="cpu", kvcache=self.kvcache,
            need_sort=self.need_sort,
        )  # fmt: skip
        # SGLANG_DEBUG_MEMORY_POOL's checks: owner congruence of every prefix end, no page
        # handed out twice, no page of another owner in a class list.
        self.allocator.debug_mode = True
        self.tree = UnifiedRadixCache(CacheInitParams(
            disable=False, req_to_token_pool=self.r2t, token_to_kv_pool_allocator=self.allocator,
            page_size=self.page_size, is_eagle=self.spec_algorithm.is_eagle(),
            eviction_policy=self.eviction_policy, tree_components=(ComponentType.FULL,),
        ))  # fmt: skip
        assert self.tree.tree_core.supports_rotation_base

    # ---- the scheduler's calls ------------------------------------------------------------

    def admit(self, name: str, tokens: Sequence[int]) -> Tracked:
        """A new request: the radix match and the lock ``PrefillAdder`` takes at admission."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        if name in self.requests:
            raise ValueError(f"{name} is already admitted")
        tokens = tuple(int(t) for t in tokens)
        req = Req(name, "", array("q", tokens), SamplingParams(max_new_tokens=1))
        req.init_next_round_input(self.tree)
        req.lock = self.tree.lock(req.last_node)
        uid = len(self.requests)
        tracked = Tracked(name, uid, tokens, self._contents(uid, tokens), req)
        self.requests[name] = tracked
        return tracked

    def _contents(self, uid: int, tokens: tuple[int, ...]) -> list[int]:
        contents = [uid] * len(tokens)
        for other in sorted(self.requests.values(), key=lambda t: -t.uid):  # earliest wins
            common = 0
            for a, b in zip(tokens, other.tokens, strict=False):
                if a != b:
                    break
                common += 1
            contents[:common] = other.contents[:common]
        return contents

    def schedule(self, batch: Sequence[tuple[str, int | None]]) -> Scheduled:
        """Allocate one extend batch: ``(name, tokens)`` per request, None = the rest of its
        prompt; a running request continues from its last chunk (page-aligned)."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        tracked = [self.requests[n] for n, _ in batch]
        for t, (_, extend) in zip(tracked, batch, strict=True):
            rest = len(t.tokens) - t.req.prefix_len
            t.req.extend_end = t.req.prefix_len + (rest if extend is None else extend)
        prefix = [t.req.prefix_len for t in tracked]
        before, free_before = self.tree.evictable_size(), set(self.free_pages())
        sb = ScheduleBatch.init_new([t.req for t in tracked], self.r2t, self.allocator,
                                    self.tree, self.model_config, False,
                                    self.spec_algorithm)  # fmt: skip
        sb.prepare_for_extend()
        evicted = before - self.tree.evictable_size()
        p, rows, pages, reused = self.page_size, [], [], []
        for t, q in zip(tracked, prefix, strict=True):
            t.row = int(t.req.kv.req_pool_idx)
            seq = t.req.extend_end
            rows.append(BatchRow(t, q, seq - q))
            pages.append([int(x) // p for x in self.r2t.req_to_token[t.row, :seq:p]])
            for j in range(q // p, len(pages[-1])):  # pages this step writes
                page = pages[-1][j]
                mine = {t.content(i) for i in range(j * p, min(seq, (j + 1) * p))}
                if self.written.get(page, mine) - mine:
                    reused.append((page, t.name))
                self.written[page] = mine
        taken = {int(x) // p for x in sb.out_cache_loc}
        evicted_pages = sorted((set(self.free_pages()) | taken) - free_before)
        bases = [getattr(t.req, "kv_rotation_base", None) for t in tracked]
        loc = sb.out_cache_loc.clone()
        return Scheduled(rows, loc, pages, evicted, evicted_pages, reused, bases)

    def checkpoint(self, name: str) -> None:
        """A chunked request between its chunks (``stash_chunked_request``)."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        checkpoint_kv_cache(self.requests[name].req, self.tree)

    def finish(self, name: str) -> None:
        """A finished prefill: the tree keeps what it can key, the rest is freed."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req = self.requests[name].req
        req.finished_reason = FINISH_LENGTH(length=1)
        release_kv_cache(req, self.tree, checkpoint=True)

    def abort(self, name: str) -> None:
        """An abort mid-prefill: nothing of the request is published; its pages are freed."""
        from sglang.srt.disaggregation.utils import prepare_abort
        from sglang.srt.mem_cache.common import release_kv_cache

        req = self.requests[name].req
        prepare_abort(req, "aborted by the client")
        release_kv_cache(req, self.tree, checkpoint=False)

    def free_pages(self) -> list[int]:
        """Every free logical page, sorted (the allocator's own census)."""
        return sorted(int(x) for x in self.allocator.get_all_free_pages())
