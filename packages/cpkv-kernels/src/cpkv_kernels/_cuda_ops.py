"""The CUDA ops ``cpkv::<op>_cuda``: JIT-built on first use, plus their fake kernels.

The schemas and CUDA kernels come from ``csrc/binding.cpp`` (``TORCH_LIBRARY_FRAGMENT(cpkv)``);
the fake (meta) kernels are registered here once the library is loaded, so the ops trace under
``torch.compile``. Every op writes into a tensor the caller passes and returns nothing, so each
fake returns None.
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
                torch.library.register_fake(f"cpkv::{op}_cuda")(_fake)
            _READY = True
    return result
