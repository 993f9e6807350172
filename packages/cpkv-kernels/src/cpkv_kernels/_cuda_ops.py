"""The CUDA ops ``cpkv::<op>_cuda``: JIT-built on first use, plus their fake kernels.

The schemas and CUDA kernels come from ``csrc/binding*.cpp`` (``TORCH_LIBRARY_FRAGMENT(cpkv)``);
the fake (meta) kernels are registered here once the library is loaded, so the ops trace under
``torch.compile``: the contract's (``cpkv_runtime._contract``). Most ops write into tensors the
caller passes and return nothing (their fake returns None); the per-forward ``plan_slots``,
``fill_sources`` and ``shard_plan`` allocate their outputs, and their fakes allocate the same
shapes. The C++ schemas are the contract's too (``tests/test_kernels_contract.py`` holds them).
"""

from __future__ import annotations

import threading

import torch
from cpkv_runtime._contract import OP_SPECS

from . import _jit

_LOCK = threading.Lock()
_READY = False


def load() -> _jit.BuildResult:
    """Build (first use) and load the CUDA extension, then register its fake kernels.

    Raises:
        KernelBuildError: the build or load failed (the message names the build log).
    """
    global _READY
    result = _jit.load()
    with _LOCK:
        if not _READY:
            for op, spec in OP_SPECS.items():
                torch.library.register_fake(f"cpkv::{op}_cuda")(spec.fake)
            _READY = True
    return result
