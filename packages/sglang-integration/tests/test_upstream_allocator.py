"""``cpkv_validate.SGLangAllocator`` makes SGLang 0.5.23's page decisions, checked against SGLang.

The same script (admit, prefill a batch, checkpoint, finish, evict) drives our model and SGLang's
own objects on the CPU: ``RadixCache``, ``PagedTokenToKVPoolAllocator`` (its torch
``alloc_extend_naive`` path, which CPU runs), ``ReqToTokenPool`` and real ``Req``s, through the
scheduler's own functions: ``Req.init_next_round_input`` (the radix match, capped at ``len - 1``),
``RadixCache.lock``, ``ScheduleBatch.prepare_for_extend`` (``alloc_for_extend``: last-page
continuation, fresh pages, the request-to-token row), ``checkpoint_kv_cache`` after every step
and ``release_kv_cache(checkpoint=True)`` at finish. Nothing of SGLang is replaced; the process
publishes a test topology with SGLang's own ``published_topology``. After every phase the
request's prefix length, its page list, the tree-owned length and the whole free list must be
equal.

Eviction: SGLang evicts least-recently-used leaves by token count; the script evicts a named
entry. The driver asks SGLang to evict as many tokens as our model freed, in scripts where that
entry's leaf is the only unlocked one, so the two must free the same pages in the same order.

The driver calls SGLang's functions in the engine's order: every request of a batch is
checkpointed, then the finished ones are released (SGLang's result loop releases a finished
request between the checkpoints of the others; no script here depends on that order).
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import pytest
import torch
from _sglang_env import SGLANG_IMPORT_WARNINGS
from cpkv_validate import REST, Request, SGLangAllocator, Step, build_scenario, scenario_names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = SGLANG_IMPORT_WARNINGS

NUM_PAGES = 256


class _SGLang:
    """SGLang's radix cache and paged allocator, driven the way its scheduler drives them."""

    def __init__(self, page_size: int) -> None:
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixCache

        self.p = page_size
        self.r2t = ReqToTokenPool(
            size=32, max_context_len=2048, device="cpu", enable_memory_saver=False
        )
        self.alloc = PagedTokenToKVPoolAllocator(
            size=NUM_PAGES * page_size,
            page_size=page_size,
            dtype=torch.float32,
            device="cpu",
            kvcache=None,
            need_sort=False,
        )
        assert not self.alloc.use_triton_kernels  # the CPU path: alloc_extend_naive
        self.tree = RadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=self.r2t,
                token_to_kv_pool_allocator=self.alloc,
                page_size=page_size,
            )
        )
        self.reqs: dict[str, object] = {}

    def admit(self, name: str, tokens: list[int]) -> tuple[int, list[int]]:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        req = Req(name, "", array("q", tokens), SamplingParams(max_new_tokens=1))
        req.init_next_round_input(self.tree)
        req.lock = self.tree.lock(req.last_node)  # PrefillAdder._commit_prefill_admission
        self.reqs[name] = req
        path = self.tree.prefix_device_indices(req) if req.prefix_len else torch.empty(0)
        return req.prefix_len, [int(x) // self.p for x in path[:: self.p]]

    def step(self, batch: list[tuple[str, int]]) -> None:
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        reqs = [self.reqs[n] for n, _ in batch]
        for req, (_, extend) in zip(reqs, batch, strict=True):
            req.extend_end = req.prefix_len + extend
        model = SimpleNamespace(vocab_size=1024, is_encoder_decoder=False)
        sb = ScheduleBatch.init_new(
            reqs, self.r2t, self.alloc, self.tree, model, False, SpeculativeAlgorithm.NONE
        )
        sb.prepare_for_extend()

    def checkpoint(self, name: str) -> None:
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        checkpoint_kv_cache(self.reqs[name], self.tree)

    def release(self, name: str) -> None:
        from sglang.srt.mem_cache.common import release_kv_cache

        release_kv_cache(self.reqs.pop(name), self.tree, checkpoint=True)

    def evict(self, num_tokens: int) -> None:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        self.tree.evict(EvictParams(num_tokens=num_tokens))

    def pages(self, name: str) -> list[int]:
        req = self.reqs[name]
        row = self.r2t.req_to_token[req.kv.req_pool_idx, : req.extend_end]
        return [int(x) // self.p for x in row[:: self.p]]

    def protected(self, name: str) -> int:
        return self.reqs[name].kv.cache_protected_len

    def free(self) -> list[int]:
        return self.alloc.free_pages.tolist()


#: An extend meaning "one page-aligned chunk": up to the first page boundary at least one page
#: ahead, as SGLang's chunker cuts a prompt that does not fit (the rest when that reaches the end).
CHUNK = "chunk"


def _extend(req: Request, e: object, page_size: int) -> int:
    rest = len(req.tokens) - req.cached
    if e is REST:
        return rest
    if e == CHUNK:
        return min((req.cached // page_size + 1) * page_size - req.cached, rest)
    return int(e)


def _drive(steps, page_size: int) -> int:
    """Run ``steps`` on both; assert equal page decisions after every phase.

    Returns:
        How many page decisions were compared (so a vacuous script is visible).
    """
    from sglang.test.test_utils import published_topology

    with published_topology(page_size=page_size, device="cpu"):
        theirs, ours = _SGLang(page_size), SGLangAllocator(NUM_PAGES, page_size)
        mine: dict[str, Request] = {}
        compared = 0
        for k, step in enumerate(steps):
            for name, tokens in step.admit:
                req = mine[name] = Request(name, list(tokens))
                ours.admit(req)
                hit, pages = theirs.admit(name, list(tokens))
                assert (req.hit, req.pages) == (hit, pages), f"step {k} admit {name}"
            batch = [(n, _extend(mine[n], e, page_size)) for n, e in step.batch]
            batch = [(n, e) for n, e in batch if e > 0]  # a finished prompt is past prefill
            reqs = [mine[n] for n, _ in batch]
            ours.extend(reqs, [r.cached + e for r, (_, e) in zip(reqs, batch, strict=True)])
            if batch:
                theirs.step(batch)
            for r, (_, e) in zip(reqs, batch, strict=True):
                r.cached += e
                assert r.pages == theirs.pages(r.name), f"step {k} alloc {r.name}"
            for r in reqs:
                ours.commit(r)
                theirs.checkpoint(r.name)
            for r in reqs:
                got = (r.pages, r.protected)
                assert got == (theirs.pages(r.name), theirs.protected(r.name)), (k, r.name)
                compared += len(r.pages)
            for name in step.finish:
                ours.finish(mine.pop(name))
                theirs.release(name)
            for name in step.evict:
                before = ours.num_free()
                ours.evict(name)
                theirs.evict((ours.num_free() - before) * page_size)
            assert list(ours.free) == theirs.free(), f"step {k}: free lists differ"
            compared += 1
        return compared


@pytest.mark.parametrize("name", scenario_names())
def test_every_scenario_makes_sglangs_page_decisions(name):
    """The fixed table: every registered scenario at page size 16 (the tiny model's)."""
    sc = build_scenario(name, page_size=16, seed=0)
    assert _drive(sc.steps, 16) > 0


@st.composite
def _scripts(draw):
    """Random steps over shared documents: prefix hits ending anywhere, the same uncached prefix
    admitted twice in one batch, page-aligned chunks, finishes; every admission runs at once."""
    p = draw(st.sampled_from([1, 4, 16]))
    base = draw(st.lists(st.integers(0, 7), min_size=1, max_size=6 * p))
    docs = [base, [*base[: draw(st.integers(0, len(base)))], 8, 9], [10 + i for i in range(3 * p)]]
    steps, live, n = [], set(), 0
    for _ in range(draw(st.integers(1, 5))):
        admit = []
        for _ in range(draw(st.integers(0 if live else 1, 3))):
            doc = draw(st.sampled_from(docs))
            own = [100 + n] * draw(st.integers(0, 2 * p))
            admit.append((f"r{n}", doc[: draw(st.integers(0, len(doc)))] + own or [100 + n]))
            n += 1
        new = [name for name, _ in admit]
        running = new + [name for name in sorted(live) if draw(st.booleans())]
        batch = [(name, draw(st.sampled_from([REST, CHUNK]))) for name in running]
        finish = [name for name, e in batch if e is REST and draw(st.booleans())]
        live = (live | set(new)) - set(finish)
        steps.append(Step(admit=admit, batch=batch, finish=finish))
    return p, steps


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scripts())
def test_random_scripts_make_sglangs_page_decisions(case):
    page_size, steps = case
    assert _drive(steps, page_size) > 0
