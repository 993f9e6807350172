"""The CUDA ops ``cpkv::<op>_cuda``: JIT-built on first use, plus their fake kernels.

The schemas and CUDA kernels come from ``csrc/binding*.cpp`` (``TORCH_LIBRARY_FRAGMENT(cpkv)``);
the fake (meta) kernels are registered here once the library is loaded, so the ops trace under
``torch.compile``. Most ops write into tensors the caller passes and return nothing (their fake
returns None); the per-forward ``plan_slots`` and ``fill_sources`` allocate their outputs, and
their fakes allocate the same shapes.
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


_FAKES = {"plan_slots": _fake_plan_slots, "fill_sources": _fake_fill_sources}


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
