"""Stand-ins for the parts of SGLang's DSA prefill that need CUDA or NCCL, for CPU tests.

Each entry of :data:`REPLACEMENTS` names what is replaced, why it cannot run here, and what runs
instead. A stand-in computes what the replaced kernel computes (a Triton or CUDA launch becomes a
torch function with the kernel's arguments), so the SGLang code around it (wrappers, layouts,
views, dispatch) runs unchanged. ``_sglang_dsa.py`` drives SGLang with them installed.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

REPLACEMENTS: tuple[tuple[str, str], ...] = (
    ("torch.cuda.get_device_capability, SGLang's platform facts, and sglang.srt.utils.is_blackwell "
     "(the backend keeps it as _is_blackwell; it asks CUDA)",
     "the emulated GPU of cpkv-serve --dry-run --gpu (sglang_cpkv.serve._dry_run.emulated_gpu)"),
    ("sglang.kernels.ops.attention.dsa.cp_split._dsa_cp_interleave_q_seqs_kernel (Triton)",
     "the same kernel run by Triton's CPU interpreter"),
    ("sglang.kernels.ops.attention.dsv4.topk.plan_topk_v2 (JIT CUDA)",
     "an empty routing plan; only the PAGED v2 transform reads it, never RAGGED"),
    ("sglang.kernels.ops.attention.dsv4.topk.topk_transform_ragged_v2 (JIT CUDA)",
     "torch: SGLang's own _topk_unfused over each row's window, then + out_offsets"),
    ("sglang.kernels.ops.quantization.dsa_quant_k_cache._quantize_k_cache_fast_kernel (Triton; "
     "Triton's CPU interpreter writes other fp8 bytes than torch's e4m3 cast)",
     "torch: per-128 amax scale, fp8 e4m3 cast, RoPE copied (the wrapper and layout stay)"),
    ("sglang.kernels.ops.attention.dsa.dequant_k_cache._dequantize_k_cache_paged_kernel (Triton; "
     "the same interpreter limit on fp8)",
     "torch: gather rows by page_table_1_flattened, fp8 x scale, RoPE copied"),
    ("sglang.kernels.ops.attention.flash_mla_interface.flash_mla_sparse_fwd (FlashMLA CUDA; the "
     "module loads libcuda on import)",
     "a module holding a torch sparse MLA (softmax over the listed rows) that records its inputs"),
    ("sglang.kernels.ops.attention.flash_mla_interface.get_mla_metadata (FlashMLA CUDA)",
     "empty scheduler tensors: only the flashmla_kv kernel reads them (metadata-only runs)"),
    ("get_parallel().attn_cp_group (NCCL GroupCoordinator)",
     "in-process group: all_gather_into_tensor concatenates every rank's padded shard"),
    ("sglang.srt.layers.attention.dsa_backend._compiled_cat (torch.compile)",
     "its own function run eagerly (torch.cat; inductor would build C++ on the CPU)"),
)  # fmt: skip


class _Launch:
    """A ``kernel[grid](...)`` launch computed by a torch function."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self.fn


def _quantize(out_q, out_s, out_rope, k_nope, k_rope, *strides, GROUP_SIZE, FP8_MIN, FP8_MAX,
              **_):  # fmt: skip
    y = k_nope.float().view(k_nope.shape[0], -1, GROUP_SIZE)
    scale = y.abs().amax(-1) / FP8_MAX
    q = (y * (1.0 / scale)[..., None]).clamp(FP8_MIN, FP8_MAX).to(out_q.dtype)
    out_q.copy_(q.view(out_q.shape))
    out_s.copy_(scale.view(out_s.shape))
    out_rope.copy_(k_rope)


def fp8_quantizer() -> _Launch:
    """The fp8 quantizing store's stand-in (REPLACEMENTS), as a launchable kernel, for code that
    installs it on its own (the shared-KV ranks, one process each)."""
    return _Launch(_quantize)


def paged_dequantizer() -> _Launch:
    """The paged dequantiser's stand-in (REPLACEMENTS), as a launchable kernel."""
    return _Launch(_dequantize_paged)


def _dequantize_paged(out, in_q, in_s, in_rope, table, *strides, GROUP_SIZE, DIM_NOPE, **_):
    rows, out = table.long(), out.view(len(table), -1)
    q = in_q[rows].float().view(len(rows), -1, GROUP_SIZE)
    out[:, :DIM_NOPE] = (q * in_s[rows][..., None]).view(len(rows), DIM_NOPE).to(out.dtype)
    out[:, DIM_NOPE:] = in_rope[rows].to(out.dtype)


def _topk_ragged(scores, seq_lens, *, out_offsets, out_indices, row_starts=None):
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import _topk_unfused

    local = _topk_unfused(scores, seq_lens, out_indices.shape[1], row_starts=row_starts)
    out_indices.copy_(torch.where(local >= 0, local + out_offsets[:, None].to(local), local))


def _empty_plan(seq_lens, static_threshold=-1, *, out=None):
    plan = seq_lens.new_zeros(seq_lens.shape[0] + 1, 2) if out is None else out.zero_()
    plan[0, 0] = -1
    return plan


def mla_schedule(cache_seqlens, **_):
    """Stands in for FlashMLA's ``get_mla_metadata`` (the legacy split-KV schedule of the
    sgl-flash-mla 1.0.0 wheel): it plans for the batch it is given, ``b = len(cache_seqlens)``
    query rows (SGLang passes ``dsa_cache_seqlens_int32``, one per query token, padded to a CP
    rank's physical rows), so an empty tile schedule (only the kernel stand-in reads it) and
    ``num_splits`` of shape ``(b + 1)``, as the wheel returns. FlashMLA's decode kernel asserts
    that ``b`` is its own batch (``q.shape[0]``); ``_skv_backend_stand_ins.check_num_splits``
    holds its stand-in to the same rule."""
    return torch.empty(0, dtype=torch.int32), torch.zeros(len(cache_seqlens) + 1, dtype=torch.int32)


class SparseMLA:
    """Torch sparse MLA in place of FlashMLA's ``flash_mla_sparse_fwd``; keeps each call.

    It computes in float64 and rounds once at the end: the tests compare a query's output in a
    batch with the same query alone, bitwise, and the two calls list different numbers of rows
    (the width is the call's longest row), so a float32 sum would be blocked differently over
    the same rows and can round differently on some CPUs (seen on an AMD EPYC runner, not on
    others); in float64 the order's effect is far below one bf16 step."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, **_):
        kv2 = kv.reshape(kv.shape[0], -1)
        idx = indices.reshape(indices.shape[0], -1)
        if topk_length is not None:
            cols = torch.arange(idx.shape[1], device=idx.device)[None, :]
            idx = torch.where(cols < topk_length[:, None], idx, -1)
        width = int((idx >= 0).sum(-1).max()) if idx.numel() else 0
        idx = idx.sort(-1, descending=True).values[:, : max(width, 1)]  # valid entries first
        self.calls.append((kv2, idx))
        valid = idx >= 0
        rows = kv2[idx.clamp(min=0).long()].double()  # [T, K, 576]
        s = torch.einsum("thd,tkd->thk", q.double(), rows) * sm_scale
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        p = torch.nan_to_num(s.softmax(-1), nan=0.0)
        o = torch.einsum("thk,tkd->thd", p, rows[..., :d_v]).to(q.dtype)
        lse = torch.logsumexp(s, -1)
        return o, s.amax(-1).float(), lse.float()


class InProcessCPGroup:
    """The CP group's all-gather, computed in one process from the chunk every rank shards."""

    def __init__(self, chunk: torch.Tensor, cp: int, physical: int) -> None:
        self.chunk, self.world_size, self.physical = chunk, cp, physical

    def shard(self, rank: int) -> torch.Tensor:
        rows = self.chunk[rank :: self.world_size]
        pad = self.chunk.new_zeros((self.physical - rows.shape[0], *rows.shape[1:]))
        return torch.cat([rows, pad])

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor) -> None:
        from sglang.srt.runtime_context import get_parallel

        rank = get_parallel().attn_cp_rank
        assert torch.equal(input, self.shard(rank)), f"rank {rank} gathers a different shard"
        output.copy_(torch.cat([self.shard(r) for r in range(self.world_size)]))


@contextlib.contextmanager
def cuda_stand_ins(monkeypatch: Any) -> Iterator[SparseMLA]:
    """Install :data:`REPLACEMENTS` (except the GPU emulation and the group, set per rank)."""
    import sglang.kernels.ops.attention.dsa.cp_split as cp_split
    import sglang.kernels.ops.attention.dsa.dequant_k_cache as dequant
    import sglang.kernels.ops.attention.dsv4.topk as topk_v2
    import sglang.kernels.ops.quantization.dsa_quant_k_cache as quant
    import sglang.srt.layers.attention.dsa_backend as dsa_backend
    from triton.runtime.interpreter import InterpretedFunction

    kernel = cp_split._dsa_cp_interleave_q_seqs_kernel
    monkeypatch.setattr(cp_split, "_dsa_cp_interleave_q_seqs_kernel", InterpretedFunction(
        getattr(kernel, "fn", kernel)))  # fmt: skip
    monkeypatch.setattr(topk_v2, "plan_topk_v2", _empty_plan)
    monkeypatch.setattr(topk_v2, "topk_transform_ragged_v2", _topk_ragged)
    monkeypatch.setattr(quant, "_quantize_k_cache_fast_kernel", fp8_quantizer())
    monkeypatch.setattr(dequant, "_dequantize_k_cache_paged_kernel", _Launch(_dequantize_paged))
    mla = SparseMLA()
    monkeypatch.setitem(sys.modules, "sglang.kernels.ops.attention.flash_mla_interface",
                        types.SimpleNamespace(flash_mla_sparse_fwd=mla,
                                              get_mla_metadata=mla_schedule))  # fmt: skip
    compiled = dsa_backend._compiled_cat
    monkeypatch.setattr(dsa_backend, "_compiled_cat", inspect.unwrap(
        getattr(compiled, "_torchdynamo_orig_callable", compiled)))  # fmt: skip
    yield mla
