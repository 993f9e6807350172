"""Per-request context-parallel shared-KV runtime for DSA prefill, in PyTorch (reference semantics).

Everything is keyed by ``(request, page)``, never by page value alone, so a batch whose requests
share physical prefix pages stays correct at batch size > 1. Triton and CUDA backends plug in
through the entry-point group ``cpkv_runtime.backends``.

Environment variables:

- ``CPKV_BACKEND``: ``auto`` (default, ``cuda > triton > torch`` by availability) | ``torch`` |
  ``triton`` | ``cuda``; every op's ``backend=`` overrides it per call.
- ``CPKV_DEBUG``: ``1`` re-checks invariants 1–2 after every op; unset (off) by default.
- ``CPKV_EXTRA_BACKENDS``: ``module:callable,...`` backend factories to load besides the installed
  entry points (for ``PYTHONPATH`` checkouts); unset by default.
- ``CPKV_CP_SPLIT_MAX_BYTES``: memory budget (bytes) of ``cp_split``; unset: what the device can
  host now (CUDA free + cached memory, CPU ``MemAvailable``); ``max_bytes=`` overrides it per call.
- ``CPKV_LAYOUT_MAX_BYTES``: memory budget (bytes) of ``plan_layout`` and ``plan_layout_static``;
  unset: what the device can host now, asked only for a plan over 64 MiB and never while a CUDA
  graph is captured; ``max_bytes=`` overrides it per call.

Each is declared, and parsed, in ``cpkv_cli.environment``.
"""

from ._backend import NO_TRITON, OP_NAMES, PRIORITY, Backend
from ._cp import CPSplit, cp_split, gather_order, localize
from ._dispatch import available_backends, register_backend
from ._dispatch import resolve as resolve_backend
from ._invariants import check_invariants
from ._layer_step import LayerStep, prepare_layer_step
from ._layout import Layout, current_tokens, plan_layout
from ._layout_static import plan_layout_static
from ._ops import (
    current_page_mask,
    fill_current,
    gather_pages,
    materialize,
    remap_locs,
    remap_positions,
)
from .errors import BackendWarning, BuildError, CpkvError, InvariantError, LayoutError

__version__ = "0.1.0"

# Grouped by topic (house style), not alphabetically.
__all__ = [  # noqa: RUF022
    # Layout
    "Layout",
    "plan_layout",
    "current_tokens",
    # Ops
    "materialize",
    "fill_current",
    "remap_locs",
    "remap_positions",
    "current_page_mask",
    # Per-forward planning and the per-layer sequence (no host sync, CUDA-graph capturable)
    "plan_layout_static",
    "prepare_layer_step",
    "LayerStep",
    "gather_pages",
    # Context parallelism
    "CPSplit",
    "cp_split",
    "gather_order",
    "localize",
    # Checks
    "check_invariants",
    # Backends
    "Backend",
    "NO_TRITON",
    "OP_NAMES",
    "PRIORITY",
    "available_backends",
    "register_backend",
    "resolve_backend",
    # Errors
    "CpkvError",
    "LayoutError",
    "InvariantError",
    "BuildError",
    "BackendWarning",
]
