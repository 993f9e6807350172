"""The CUDA ops ``cpkv::<op>_cuda``: JIT-built on first use, plus their fake kernels.

The schemas and CUDA kernels come from ``csrc/binding*.cpp`` (``TORCH_LIBRARY_FRAGMENT(cpkv)``);
the fake (meta) kernels are registered here once the library is loaded, so the ops trace under
``torch.compile``. Most ops write into tensors the caller passes and return nothing (their fake
returns None); the per-forward ``plan_slots``, ``fill_sources`` and ``shard_plan`` allocate their
outputs, and their fakes allocate the same shapes.
"""

from __future__ import annotations

import threading

import torch
from cpkv_runtime import OP_NAMES

from . import _jit

_LOCK = threading.Lock()
_READY = False


def _fake(*args: object) -> None:
    return None


def _fake_plan_slots(
    req_pages: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_lens: torch.Tensor,
    page_size: int,
    num_pages: int,
    max_slots: int,
    dedup: bool,
) -> tuple[torch.Tensor, ...]:
    bsz, width = req_pages.shape

    def new(*shape: int) -> torch.Tensor:
        return req_pages.new_empty(shape, dtype=torch.int32)

    lens = (new(bsz) for _ in range(4))  # prefix, extend, seq, pages_used
    return (
        new(bsz, width), *lens, new(bsz, width), new(max_slots), new(max_slots),
        new(bsz, num_pages), new(1), new(1), new(3),
    )  # fmt: skip


def _fake_fill_sources(
    token_req: torch.Tensor,
    out_cache_loc: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    num_slots: int,
) -> torch.Tensor:
    return inverse.new_empty((num_slots, page_size))


def _fake_shard_plan(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    out_cache_loc: torch.Tensor,
    lens: list[int],
    kept: list[int],
    width: int,
    page_size: int,
    num_pages: int,
    max_slots: int,
    shard_size: int,
    shard_rank: int,
    write_base: int,
    trash_page: int,
    with_layout: bool,
) -> list[torch.Tensor]:
    bsz, tokens = len(lens) // 2, out_cache_loc.shape[0]
    pages = req_to_token.new_empty((bsz, width), dtype=torch.int32)
    plan = _fake_plan_slots(pages, pages[:, 0], pages[:, 0], page_size, num_pages, max_slots, True)

    def new(n: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
        return req_to_token.new_empty((n,), dtype=dtype)

    long = torch.int64
    out = [new(3 + shard_size), plan[8], new(bsz, long), new(len(kept), long),
           new(max_slots + 1, long), new(max_slots), new(tokens, long), new(tokens, long),
           new(tokens, long)]  # fmt: skip
    if with_layout:
        out += [new(max_slots), new(max_slots), new(bsz + 1, long), plan[6], *plan[:6],
                plan[7], *plan[9:]]  # fmt: skip
    return out


_FAKES = {
    "plan_slots": _fake_plan_slots,
    "fill_sources": _fake_fill_sources,
    "shard_plan": _fake_shard_plan,
}


def load() -> _jit.BuildResult:
    """Build (first use) and load the CUDA extension, then register its fake kernels.

    Raises:
        KernelBuildError: the build or load failed (the message names the build log).
    """
    global _READY
    result = _jit.load()
    with _LOCK:
        if not _READY:
            for op in OP_NAMES:
                torch.library.register_fake(f"cpkv::{op}_cuda")(_FAKES.get(op, _fake))
            _READY = True
    return result
