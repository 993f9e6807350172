"""The configurations, scenarios and planted bugs of the backend-level shared-KV suite.

Configurations: every prefill backend the gate admits on an H200 that this suite can run
(``flashmla_sparse`` and the Triton sparse-MLA backend with bf16 KV, which take SGLang's PAGED
top-k transform, and with fp8 KV, which take RAGGED under the plugin's offset fix;
``flashmla_kv`` with packed fp8 pages, PAGED). ``flashmla_auto`` resolves per batch to one of
these on SM90 and adds no path of its own. Top-k 32 lies below every sequence of most steps (so a
wrong page read changes what the indexer selects); 256 lies above them all, as GLM's 2048 does
above short prompts (every causal row is read, and the suite checks that it is; 2048 itself
would only widen the Triton transform the interpreter runs per query row).

The scenario runs, over one cache, a fresh prefill; then a batch with radix hits on those pages
(two requests sharing the same prefix pages, one extending by a single token so some rank holds
none of its tokens), a page-aligned chunked continuation of the first request and a cache miss;
then a continuation whose prefix ends mid-page beside another hit; then a batch of fresh prompts
only (SGLang's no-prefix branch, and the RAGGED offsets of ``[1, 6]``). After the hit batch and
the fresh one the NextN draft runs its EXTEND on the draft pool. Token counts are small because
SGLang's Triton kernels run in Triton's interpreter on a CPU (one program per token).

Mutations plant a bug in one of cpkv's lookups; each must make the comparison fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from _skv_backend_model import Extend, Hit, Scenario
from _skv_backend_rank import Config

CONFIGS: tuple[Config, ...] = (
    Config("flashmla_sparse/bf16", "flashmla_sparse", "bfloat16", 32),
    Config("flashmla_sparse/fp8", "flashmla_sparse", "fp8_e4m3", 32),
    Config("triton_sparse_mla/bf16", "triton_sparse_mla", "bfloat16", 32),
    Config("triton_sparse_mla/fp8", "triton_sparse_mla", "fp8_e4m3", 32),
    Config("flashmla_kv/fp8", "flashmla_kv", "fp8_e4m3", 256),
)

SCENARIO = Scenario(
    "radix_chunk_fresh",
    (
        (Extend("A", 128), Extend("F", 40)),
        (Extend("A", 64), Extend("B", 1, Hit("A", 64)), Extend("C", 20, Hit("A", 128)),
         Extend("D", 36)),
        (Extend("F", 30), Extend("G", 2, Hit("A", 128))),
        (Extend("E1", 1), Extend("E2", 6)),
    ),
    draft=(0, 1, 2, 3),
)  # fmt: skip


@contextlib.contextmanager
def _patch(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def every_row_request_0() -> contextlib.AbstractContextManager:
    """Every row of a page table is read as request 0's."""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch

    real = ForwardScratch._table_requests
    return _patch(ForwardScratch, "_table_requests",
                  lambda self, n, what: torch.zeros_like(real(self, n, what)))  # fmt: skip


def pages_through_next_request() -> contextlib.AbstractContextManager:
    """The indexer's page reads go through the next request's inverse."""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch

    def scratch_pages(self, pages):
        req = (self._table_requests(pages.shape[0], "pages") + 1) % self.batch_size
        inverse = self.placement.inverse
        slot = inverse[req.unsqueeze(1), pages.long().clamp(0, inverse.shape[1] - 1)]
        return self.placement.slot_scratch[slot.long()]

    return _patch(ForwardScratch, "scratch_pages", scratch_pages)


def kept_rows_next_rank() -> contextlib.AbstractContextManager:
    """The interleave-CP kept requests are those of the next rank."""
    from sglang_cpkv.plugin.shared_kv import _pool

    real = _pool.interleave_kept_rows
    return _patch(_pool, "interleave_kept_rows",
                  lambda extend, n, rank: real(extend, n, (rank + 1) % n))  # fmt: skip


def staged_at_persisted_rows() -> contextlib.AbstractContextManager:
    """Current tokens are staged at their local pool rows (the persisted ones) instead of their
    request's private scratch rows. (The reverse, persisting at scratch rows, writes past the
    local pool: under Triton's interpreter, which checks no bounds, that corrupts the heap.)"""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch

    real = ForwardScratch.write_rows

    def write_rows(self, loc):
        return self.local_rows if self._is_out_cache_loc(loc) else real(self, loc)

    return _patch(ForwardScratch, "write_rows", write_rows)


MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "every_row_request_0": every_row_request_0,
    "pages_through_next_request": pages_through_next_request,
    "kept_rows_next_rank": kept_rows_next_rank,
    "staged_at_persisted_rows": staged_at_persisted_rows,
}
#: configurations each mutation runs under (one PAGED, one RAGGED), at CP 2.
MUTATION_CONFIGS = ("flashmla_sparse/bf16", "flashmla_sparse/fp8")
