"""Backends for ``cpkv_runtime``'s registry: the entry points ``triton`` and ``cuda``.

Each factory returns a :class:`cpkv_runtime.Backend`; one that cannot run here comes back with
``available=False`` and a ``reason`` instead of raising, so the runtime falls back
(``cuda > triton > torch``). Without package metadata (a ``PYTHONPATH`` checkout), call
:func:`register`, or set
``CPKV_EXTRA_BACKENDS=cpkv_kernels:triton_backend,cpkv_kernels:cuda_backend``.
"""

from __future__ import annotations

import os
import warnings

import torch
from cpkv_runtime import Backend, register_backend

from ._api import make_ops, make_raw_ops
from .errors import BuildWarning, KernelBuildError

__all__ = ["cuda_backend", "register", "triton_backend"]

_warned: set[str] = set()


def _interpret() -> bool:
    """Triton runs on CPU tensors: ``TRITON_INTERPRET=1`` now and when the kernels were defined."""
    if os.environ.get("TRITON_INTERPRET", "") != "1":
        return False
    from .ops import materialize

    return type(materialize._materialize_kernel).__name__ == "InterpretedFunction"


def triton_backend() -> Backend:
    """The Triton kernels: CUDA tensors, plus CPU tensors under ``TRITON_INTERPRET=1``."""
    devices = frozenset({"cuda", "cpu"} if _interpret() else {"cuda"})
    if not (torch.cuda.is_available() or _interpret()):  # before importing triton (~1 s)
        return Backend(
            "triton",
            available=False,
            reason="no CUDA device; set TRITON_INTERPRET=1 (before import) to run Triton on CPU",
            devices=devices,
        )
    try:
        from . import ops  # noqa: F401 - registers the cpkv::<op>_triton custom ops
    except ImportError as exc:
        return Backend("triton", available=False, reason=f"triton is not importable: {exc}")
    return Backend(
        "triton", ops=make_ops("triton"), devices=devices, raw_ops=make_raw_ops("triton")
    )


def _cuda_backend(spec: object | None = None, *, need_device: bool = True) -> Backend:
    from . import _cuda_ops, _jit

    if need_device and not torch.cuda.is_available():
        return Backend("cuda", available=False, reason="no CUDA device is visible")
    if torch.version.cuda is None:
        return Backend("cuda", available=False, reason=f"torch {torch.__version__} has no CUDA")
    try:
        if spec is None:
            _cuda_ops.load()
        else:
            _jit.load(spec)  # type: ignore[arg-type]
    except KernelBuildError as exc:
        reason = str(exc)
        if reason not in _warned:  # one warning per distinct failure, not one per lookup
            _warned.add(reason)
            warnings.warn(
                f"cpkv_kernels: CUDA backend unavailable, falling back to Triton: {reason}",
                BuildWarning,
                stacklevel=3,
            )
        return Backend("cuda", available=False, reason=reason)
    return Backend("cuda", ops=make_ops("cuda"), raw_ops=make_raw_ops("cuda"))


def cuda_backend() -> Backend:
    """The CUDA kernels, JIT-built into the cache on first use (a failed build warns once)."""
    return _cuda_backend()


def register() -> dict[str, Backend]:
    """Register both backends with ``cpkv_runtime`` by hand (for checkouts without metadata)."""
    backends = {"triton": triton_backend(), "cuda": cuda_backend()}
    for backend in backends.values():
        register_backend(backend)
    return backends
