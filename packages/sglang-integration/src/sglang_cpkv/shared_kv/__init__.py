"""Shared KV inside SGLang: KV-cache sharding over the prefill-CP ranks with a per-request scratch.

``cpkv-serve --cpkv-shared-kv`` turns on SGLang's ``--enable-kv-cache-sharding`` with
:class:`CpkvSharedKVPool` (``shared_kv._pool``, imported only when the plugin installs it: it
imports SGLang), whose per-forward scratch plan is a ``cpkv_runtime`` layout. The design note is
``docs/shared-kv.md`` in this package.

Importing this package does not import sglang.
"""

from sglang_cpkv.shared_kv._forward import ForwardScratch, TranslationError, plan_forward
from sglang_cpkv.shared_kv._plan import (
    ScratchCapacityError,
    ScratchGeometry,
    ScratchPlacement,
    current_locs,
    interleave_kept_rows,
    owned_local_rows,
    place_slots,
    request_pages,
    to_scratch,
)

__all__ = [  # noqa: RUF022 (grouped by topic, house style)
    # Plan
    "ScratchGeometry",
    "ScratchPlacement",
    "ForwardScratch",
    "place_slots",
    "plan_forward",
    "request_pages",
    "current_locs",
    "to_scratch",
    "owned_local_rows",
    "interleave_kept_rows",
    # Errors
    "ScratchCapacityError",
    "TranslationError",
]
