"""cpkv-validate's scenarios, as SGLang batches them, as pool batches (``_skv_shapes.Batch``).

Every scenario of ``cpkv_validate`` (its registry includes the SGLang-shaped ones: page-aligned
radix hits, chunked history and current, full hits with extends below cp, two prefix chains,
page-boundary lengths, the fresh RAGGED-offset prompts) is built at SGLang's DSA page size and
driven through ``cpkv_validate.SGLangAllocator`` (SGLang 0.5.23's radix cache and paged
allocator, held equal to SGLang's own objects in ``test_upstream_allocator.py``): admit, allocate
the step's batch, checkpoint, finish, evict. Each step that runs a batch becomes one ``Batch``
named ``<scenario>/step<k>``, with the prefix and extend lengths and the page lists SGLang would
hand that batch.

Where this differs from a sharded SGLang deployment: pages come from SGLang's unsharded allocator
and are relabelled onto the sharded pool's logical pages (``page + N - 1``, so logical pages
``[0, N)`` stay reserved and owners cycle with the page id), not from SGLang's interleave
allocator's per-chain owner rotation. cpkv's pool plans from the page lists alone, so any
placement exercises it; the owner pattern only changes which rank sends which page.
"""

from __future__ import annotations

from _skv_shapes import Batch, P
from cpkv_validate import REST, Request, SGLangAllocator, build_scenario, scenario_names

__all__ = ["scenario_batches", "scenario_names"]

#: Pages the unsharded allocator may hand out; every SGLang-shaped scenario needs far fewer.
_NUM_PAGES = 256


def _batch(name: str, reqs: list[Request], extends: list[int], shard_size: int) -> Batch:
    prefix = [r.cached - e for r, e in zip(reqs, extends, strict=True)]
    pages = [[page + shard_size - 1 for page in r.pages] for r in reqs]
    writers = [set(p[q // P :]) for p, q in zip(pages, prefix, strict=True)]
    local = max(page // shard_size for p in pages for page in p)
    return Batch(name, shard_size, pages, prefix, extends, local_pages=local + 1, writers=writers)


def scenario_batches(names: list[str] | None, shard_size: int) -> dict[str, Batch]:
    """``<scenario>/step<k>`` -> the batch SGLang builds at that step, for every step of every
    named scenario (None: every registered one) that runs a batch, steps in order."""
    out: dict[str, Batch] = {}
    for name in scenario_names() if names is None else names:
        scenario = build_scenario(name, page_size=P, seed=0)
        alloc = SGLangAllocator(_NUM_PAGES, P)
        live: dict[str, Request] = {}
        for k, step in enumerate(scenario.steps):
            for req_name, tokens in step.admit:
                live[req_name] = Request(req_name, list(tokens))
                alloc.admit(live[req_name])
            batch = []
            for req_name, extend in step.batch:
                r = live[req_name]
                e = len(r.tokens) - r.cached if extend is REST else int(extend)
                if e > 0:  # a finished prompt is past prefill
                    batch.append((r, e))
            reqs = [r for r, _ in batch]
            alloc.extend(reqs, [r.cached + e for r, e in batch])
            for r, e in batch:
                r.cached += e
            if batch:
                out[f"{name}/step{k}"] = _batch(
                    f"{name}/step{k}", reqs, [e for _, e in batch], shard_size
                )
            for r in reqs:
                alloc.commit(r)
            for req_name in step.finish:
                alloc.finish(live.pop(req_name))
            for req_name in step.evict:
                alloc.evict(req_name)
    return out
