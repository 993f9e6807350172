"""The configurations, scenarios and planted bugs of the backend-level shared-KV suite.

Configurations: every prefill backend the gate admits on an H200 that this suite can run
(``flashmla_sparse`` and the Triton sparse-MLA backend with bf16 KV, which take SGLang's PAGED
top-k transform, and with fp8 KV, which take RAGGED under the plugin's offset fix;
``flashmla_kv`` with packed fp8 pages, PAGED), with SGLang's torch top-k; ``+fused`` ones with
its defaults, the fused top-k kernels (``SGLANG_DSA_FUSE_TOPK=1``, ``--dsa-topk-backend
sgl-kernel``: PAGED, RAGGED, and ``flashmla_kv``, what an H200 with fp8 KV runs); and ``trtllm``
on an emulated SM100 (raw fp8 rows, with either top-k). ``flashmla_auto`` resolves per batch to
one of these on SM90 and adds no path of its own. Top-k 32 lies below every sequence of most
steps (so a wrong page read changes what the indexer selects); 256 lies above them all, as
GLM's 2048 does above short prompts (every causal row is read, and the suite checks that it is;
2048 itself would only widen the Triton transform the interpreter runs per query row). The
configurations added for issue 32 run at one CP size where a second would add no path (the
Triton interpreter makes each deployment cost 10-20 s).

The scenario runs, over one cache, a fresh prefill; then a batch with radix hits on those pages
(two requests sharing the same prefix pages, one extending by a single token so some rank holds
none of its tokens), a page-aligned chunked continuation of the first request and a cache miss;
then a continuation whose prefix ends mid-page beside another hit; then a batch of fresh prompts
only (SGLang's no-prefix branch, and the RAGGED offsets of ``[1, 6]``). After every step EAGLE's
prefill draft (SGLang's ``_draft_extend_for_prefill``) runs on the draft pool; the first request
that continues in a later step is the batch's chunked request, whose draft tail is its next
prompt token. Token counts are small because SGLang's Triton kernels run in Triton's
interpreter on a CPU (one program per token).

Mutations plant a bug in one of cpkv's lookups (or undo its RAGGED-offset fix); each must make
the comparison fail. Most show first at the indexer (layer 0's logits); one breaks only the
attention page table, which the PAGED transforms and the fused top-k map positions through.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from _skv_backend_model import Extend, Hit, Scenario
from _skv_backend_rank import SM100, Config

CONFIGS: tuple[Config, ...] = (
    Config("flashmla_sparse/bf16", "flashmla_sparse", "bfloat16", 32),
    Config("flashmla_sparse/fp8", "flashmla_sparse", "fp8_e4m3", 32),
    Config("triton_sparse_mla/bf16", "triton_sparse_mla", "bfloat16", 32),
    Config("triton_sparse_mla/fp8", "triton_sparse_mla", "fp8_e4m3", 32),
    Config("flashmla_kv/fp8", "flashmla_kv", "fp8_e4m3", 256),
    Config("triton_sparse_mla/bf16+fused", "triton_sparse_mla", "bfloat16", 32, fused_topk=True,
           cps=(2,)),
    Config("triton_sparse_mla/fp8+fused", "triton_sparse_mla", "fp8_e4m3", 32, fused_topk=True),
    Config("flashmla_kv/fp8+fused", "flashmla_kv", "fp8_e4m3", 256, fused_topk=True, cps=(4,)),
    Config("trtllm/fp8", "trtllm", "fp8_e4m3", 32, capability=SM100, cps=(2,)),
    Config("trtllm/fp8+fused", "trtllm", "fp8_e4m3", 32, fused_topk=True, capability=SM100,
           cps=(2,)),
)  # fmt: skip

#: FlashMLA's sparse prefill takes the top-k in blocks of 128 on SM90 (it asserts ``topk % 128
#: == 0``; found on an H100 with the suite's top-k of 32). The torch stand-in on a CPU has no such
#: rule, and the small top-k keeps the CPU runs selective; on the GPU the top-k is raised to it.
FLASHMLA_SPARSE_TOPK_BLOCK = 128


def on_device(config: Config, device_type: str) -> Config:
    """``config`` as it runs on ``device_type``: under CUDA, flashmla_sparse's top-k rounded up
    to :data:`FLASHMLA_SPARSE_TOPK_BLOCK` (the rows past each request's keys are -1 padding)."""
    block = FLASHMLA_SPARSE_TOPK_BLOCK
    if (
        device_type != "cuda"
        or config.backend != "flashmla_sparse"
        or config.index_topk % block == 0
    ):
        return config
    return dataclasses.replace(config, index_topk=-(-config.index_topk // block) * block)


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
def patch_attr(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block (a class's own attribute, or a module's);
    the planted bugs of every shared-KV suite go in through it."""
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
    return patch_attr(ForwardScratch, "_table_requests",
                  lambda self, n, what: torch.zeros_like(real(self, n, what)))  # fmt: skip


def pages_through_next_request() -> contextlib.AbstractContextManager:
    """The indexer's page reads go through the next request's inverse."""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch

    def scratch_pages(self, pages):
        req = (self._table_requests(pages.shape[0], "pages") + 1) % self.batch_size
        inverse = self.placement.inverse
        slot = inverse[req.unsqueeze(1), pages.long().clamp(0, inverse.shape[1] - 1)]
        return self.placement.slot_scratch[slot.long()]

    return patch_attr(ForwardScratch, "scratch_pages", scratch_pages)


def kept_rows_next_rank() -> contextlib.AbstractContextManager:
    """The interleave-CP kept requests are those of the next rank."""
    from sglang_cpkv.plugin.shared_kv import _pool

    real = _pool.interleave_kept_rows
    return patch_attr(_pool, "interleave_kept_rows",
                  lambda extend, n, rank: real(extend, n, (rank + 1) % n))  # fmt: skip


def staged_at_persisted_rows() -> contextlib.AbstractContextManager:
    """Current tokens are staged at their local pool rows (the persisted ones) instead of their
    request's private scratch rows. (The reverse, persisting at scratch rows, writes past the
    local pool: under Triton's interpreter, which checks no bounds, that corrupts the heap.)"""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch

    real = ForwardScratch.write_rows

    def write_rows(self, loc):
        return self.local_rows if self._is_out_cache_loc(loc) else real(self, loc)

    return patch_attr(ForwardScratch, "write_rows", write_rows)


def attention_table_next_request() -> contextlib.AbstractContextManager:
    """The attention page table (the one ``init_forward_metadata`` translates, which the PAGED
    transforms and the fused kernels map top-k positions through) reads each row through the
    next request's inverse; the indexer's pages stay right, so its top-k does too."""
    from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch
    from sglang_cpkv.plugin.shared_kv._plan import to_scratch

    real = ForwardScratch.translate

    def translate(self, loc):
        if loc.dim() != 2:
            return real(self, loc)
        req = (self._table_requests(loc.shape[0], "the page table") + 1) % self.batch_size
        dense = self.remap(loc, req, self.placement.inverse, self.page_size)
        return to_scratch(dense, self.placement.slot_scratch, self.page_size)

    return patch_attr(ForwardScratch, "translate", translate)


def ragged_offsets_unfixed() -> contextlib.AbstractContextManager:
    """The RAGGED-offset hook rebases a no-prefix batch's rows on SGLang's kept requests again
    (its bug), not on each request's start in the gathered chunk."""
    from sglang.srt.runtime_context import get_parallel
    from sglang_cpkv.plugin.hooks import ragged_offsets

    def kept_request_offsets(forward_batch):
        extend = list(forward_batch.extend_seq_lens_cpu)
        parallel = get_parallel()
        rows = ragged_offsets.sglang_offsets(extend, [0] * len(extend), parallel.attn_cp_size,
                                             parallel.attn_cp_rank)  # fmt: skip
        return torch.tensor(rows, dtype=torch.int32, device=forward_batch.extend_seq_lens.device)

    return patch_attr(ragged_offsets, "_chunk_offsets", kept_request_offsets)


MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "every_row_request_0": every_row_request_0,
    "pages_through_next_request": pages_through_next_request,
    "kept_rows_next_rank": kept_rows_next_rank,
    "staged_at_persisted_rows": staged_at_persisted_rows,
}
#: configurations each mutation runs under (one PAGED, one RAGGED), at CP 2.
MUTATION_CONFIGS = ("flashmla_sparse/bf16", "flashmla_sparse/fp8")

#: Planted bugs on the paths issue 32 added, at CP 2: mutation -> ((configuration, scope), ...).
#: Scope ``all`` plants the bug in every forward, ``draft`` in EAGLE's prefill draft forwards only
#: (the target's run clean, so the draft's own comparison must catch it). Each must fail.
PATH_MUTATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "every_row_request_0": (("triton_sparse_mla/bf16+fused", "all"), ("trtllm/fp8+fused", "all"),
                            ("flashmla_sparse/bf16", "draft"),
                            ("triton_sparse_mla/fp8+fused", "draft")),
    "pages_through_next_request": (("triton_sparse_mla/bf16+fused", "all"),
                                   ("triton_sparse_mla/fp8+fused", "all"),
                                   ("flashmla_sparse/bf16", "draft")),
    "kept_rows_next_rank": (("triton_sparse_mla/fp8+fused", "all"), ("trtllm/fp8+fused", "all"),
                            ("flashmla_sparse/bf16", "draft")),
    "staged_at_persisted_rows": (("triton_sparse_mla/fp8+fused", "all"),
                                 ("trtllm/fp8+fused", "all"), ("flashmla_sparse/bf16", "draft"),
                                 ("triton_sparse_mla/bf16+fused", "draft")),
    "attention_table_next_request": (("triton_sparse_mla/bf16+fused", "all"),
                                     ("triton_sparse_mla/fp8+fused", "all"),
                                     ("trtllm/fp8+fused", "all"),
                                     ("flashmla_sparse/bf16", "draft")),
    "ragged_offsets_unfixed": (("triton_sparse_mla/fp8+fused", "all"),),
}  # fmt: skip
ALL_MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    **MUTATIONS,
    "attention_table_next_request": attention_table_next_request,
    "ragged_offsets_unfixed": ragged_offsets_unfixed,
}
