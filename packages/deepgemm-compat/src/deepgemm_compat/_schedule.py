"""Paged-MQA schedule metadata: built once per batch, rebuilt when the SM count changes.

``get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)`` returns an int32
``(num_sms + 1, 2)`` tensor: the work split across SMs. Every indexer layer of a forward
reuses it, but it is stale as soon as ``set_num_sms`` changes the SM count (two-batch
overlap and the masked-GEMM overlap path do), so the cache keys on the count.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from deepgemm_compat._surface import surface
from deepgemm_compat.errors import InputError

if TYPE_CHECKING:
    import torch


def current_num_sms() -> int:
    """The SM count DeepGEMM schedules for now (``deep_gemm.get_num_sms()``)."""
    return int(surface().require("get_num_sms")())


@contextlib.contextmanager
def num_sms_scope(num_sms: int | None) -> Iterator[None]:
    """Run the block with ``deep_gemm.set_num_sms(num_sms)``; ``None`` leaves it alone."""
    if num_sms is None:
        yield
        return
    set_, old = surface().require("set_num_sms"), current_num_sms()
    set_(int(num_sms))
    try:
        yield
    finally:
        set_(old)


def build_schedule(context_lens: torch.Tensor, block_kv: int, num_sms: int) -> torch.Tensor:
    """Call the wheel's ``get_paged_mqa_logits_metadata`` (no caching)."""
    return surface().require("paged_mqa_logits_metadata")(context_lens, block_kv, num_sms)


def check_schedule(meta: torch.Tensor, num_sms: int) -> None:
    """A caller-built schedule must have ``num_sms + 1`` rows for the current SM count."""
    if meta.dim() != 2 or meta.shape[0] != num_sms + 1:
        raise InputError(
            f"schedule_meta has shape {tuple(meta.shape)} but DeepGEMM now schedules "
            f"{num_sms} SMs, which needs {num_sms + 1} rows; it was built for another SM "
            "count: pass schedule_meta=None to rebuild it (cached) or rebuild it yourself"
        )


class ScheduleCache:
    """The last schedule built, valid while the same context-lens tensor is unchanged.

    The key holds the tensor itself (so its memory cannot be recycled into a look-alike),
    its in-place version counter, ``block_kv`` and the SM count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lens: torch.Tensor | None = None
        self._key: tuple | None = None
        self._meta: torch.Tensor | None = None
        self.builds = 0

    def get(
        self, context_lens: torch.Tensor, block_kv: int, num_sms: int | None = None
    ) -> torch.Tensor:
        """The schedule for ``context_lens``: cached, or rebuilt if anything changed."""
        sms = current_num_sms() if num_sms is None else int(num_sms)
        key = (context_lens._version, tuple(context_lens.shape), int(block_kv), sms)
        with self._lock:
            if self._lens is context_lens and self._key == key and self._meta is not None:
                return self._meta
            meta = build_schedule(context_lens, int(block_kv), sms)
            self._lens, self._key, self._meta = context_lens, key, meta
            self.builds += 1
            return meta

    def clear(self) -> None:
        with self._lock:
            self._lens = self._key = self._meta = None


DEFAULT_CACHE = ScheduleCache()
