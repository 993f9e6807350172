"""Shared KV inside SGLang: KV-cache sharding over the prefill-CP ranks with a per-request scratch.

``cpkv-serve --cpkv-shared-kv`` turns on SGLang's ``--enable-kv-cache-sharding`` with
``CpkvSharedKVPool`` (``shared_kv._pool``, imported only when the plugin installs it: it imports
SGLang), whose per-forward scratch plan comes from ``cpkv_runtime``'s ``shard_plan`` op, read
back to the host once per forward (``plan_forward``) and never per layer. The design note is
``docs/shared-kv.md`` in this package.

Importing this package imports neither sglang nor torch: the names below load on first use
(the plugin's hook table imports the gate at SGLang start-up, before torch is needed).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    # Plan
    "ScratchGeometry": "_plan",
    "ScratchPlacement": "_plan",
    "ForwardScratch": "_forward",
    "plan_forward": "_forward",
    "ShardOps": "_forward",
    "shard_ops": "_forward",
    # Plan halves around its one host read
    "ForwardDraft": "_forward",
    "draft_forward": "_forward",
    "finish_forward": "_forward",
    # Helpers around the plan
    "current_locs": "_plan",
    "to_scratch": "_plan",
    "owned_local_rows": "_plan",
    "interleave_kept_rows": "_plan",
    # Per layer
    "pack_launcher": "_plan",
    # Gate
    "GateInput": "_gate",
    "Verdict": "_gate",
    "backend_verdict": "_gate",
    "gate_refusals": "_gate",
    # Capacity
    "ScratchSpec": "_capacity",
    "capacity_report": "_capacity",
    # Errors
    "ScratchCapacityError": "_plan",
    "TranslationError": "_forward",
}

__all__ = list(_HOME)  # grouped by topic in _HOME (house style)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
