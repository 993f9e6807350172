"""SGLang's own DSA kernels, imported where SGLang cannot serve (no ``sgl-kernel``).

Used by the layer benchmarks (``_layer_cases``) and by two tests that load it from this folder
(``tests/test_gpu_ragged_offsets.py``, ``tests/test_bench_shared_kv_layer_dry.py``); neither the
plugin nor ``cpkv-serve`` needs it, so it is not part of ``sglang_cpkv``.

``sglang.kernels.ops.attention.dsa.triton_sparse_mla_prefill`` needs neither ``sgl-kernel`` nor
``flashinfer``, but its import chain reaches ``sglang.utils``, which imports ``HTML`` and
``display`` from ``IPython.display`` for notebooks. Where IPython is missing (the H200 box), a
stand-in is put in ``sys.modules`` for the import only and taken out again: a fake ``IPython``
left behind misleads other libraries (matplotlib asks it whether a REPL is running).
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ipython_stand_in", "load_sparse_mla_prefill"]


@contextmanager
def ipython_stand_in() -> Iterator[bool]:
    """Inside the block, ``from IPython.display import HTML, display`` works; yields whether a
    stand-in was needed. A stand-in is removed on exit; a real IPython is never touched."""
    if importlib.util.find_spec("IPython") is not None:
        yield False
        return
    display = types.ModuleType("IPython.display")
    display.HTML = display.display = lambda *args, **kwargs: None
    package = types.ModuleType("IPython")
    package.display = display
    stand_ins = {"IPython": package, "IPython.display": display}
    sys.modules.update(stand_ins)
    try:
        yield True
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def load_sparse_mla_prefill() -> Callable[..., Any]:
    """``sparse_mla_prefill(q [T,H,576] bf16, kv [S,576] bf16, indices [T,K] int32, sm_scale,
    d_v=512)`` from SGLang's Triton sparse-MLA prefill module."""
    with ipython_stand_in(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time warnings of optional sglang dependencies
        from sglang.kernels.ops.attention.dsa.triton_sparse_mla_prefill import sparse_mla_prefill
    return sparse_mla_prefill
