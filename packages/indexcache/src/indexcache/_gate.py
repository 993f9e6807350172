"""The gate (run the indexer or reuse?) and the carry that threads top-k between layers.

Gate: a layer runs its indexer iff it is full, or it is a NextN layer with nothing carried. A
shared layer never falls back to computing: its checkpoint has no indexer weights, and computing
with an uninitialised indexer once produced garbage past ``index_topk`` tokens. A shared layer
with nothing carried is an error, raised here, before any attention runs.

The carry keeps a top-k only while the next layer will reuse it (``next_layer_reuses``): a
``[T, index_topk]`` int32 buffer is 512 MiB at T = 64K, so it is dropped as soon as no one needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from indexcache._schedule import FULL, NEXTN, IndexerSchedule
from indexcache.errors import CarryError, IncompatibleOptionError

if TYPE_CHECKING:  # annotations only: schedule/gate users (glm-config, plugins) never load torch
    import torch


def should_run_indexer(schedule: IndexerSchedule, layer: int, *, carried: bool) -> bool:
    """Whether ``layer`` runs its own lightning indexer.

    Args:
        schedule: the model's schedule.
        layer: a main-model layer index, or a NextN layer (``>= schedule.num_layers``).
        carried: whether a top-k from an earlier layer (or the previous MTP step) is available.

    Returns:
        True for a full layer, and for a NextN layer with nothing carried; False for a shared layer
        and for a NextN layer that has a carried top-k to reuse.

    Raises:
        CarryError: ``layer`` is shared and nothing is carried (it cannot compute: no weights).
    """
    kind = schedule.kind(layer)
    if kind == FULL:
        return True
    if kind == NEXTN:
        return not carried
    if not carried:
        raise CarryError(
            f"layer {layer} is shared (it reuses layer {schedule.source_layer(layer)}'s top-k) but "
            f"nothing is carried; a shared layer has no indexer weights and must not compute. "
            f"Fix: run the layers in order through one TopkCarry, or seed the carry with layer "
            f"{schedule.source_layer(layer)}'s top-k (e.g. at a pipeline-stage boundary)."
        )
    return False


def check_two_batch_overlap(schedule: IndexerSchedule, enabled: bool) -> None:
    """Reject two-batch overlap when some layer shares (its micro-batches cannot carry top-k).

    Raises:
        IncompatibleOptionError: ``enabled`` and ``schedule.shares``.
    """
    if enabled and schedule.shares:
        raise IncompatibleOptionError(
            f"two-batch overlap cannot carry the indexer top-k between layers, but this schedule "
            f"shares {schedule.num_shared} of {schedule.num_layers} layers "
            f"(from {schedule.source}: {schedule.pattern}). Fix: disable two-batch overlap, or run "
            f"every layer's indexer (index_topk_freq=1)."
        )


class TopkCarry:
    """Threads the indexer top-k from the layer that computed it to the layers that reuse it.

    One carry per forward pass; call :meth:`step` for every layer in order.

    Example:
        >>> carry = TopkCarry(IndexerSchedule.from_freq(8, freq=4, offset=2))
        >>> for layer in range(8):
        ...     topk = carry.step(layer, lambda: torch.zeros(5, 2, dtype=torch.int32))
    """

    def __init__(self, schedule: IndexerSchedule) -> None:
        self.schedule = schedule
        self._topk: torch.Tensor | None = None
        self._source: int | None = None

    @property
    def topk(self) -> torch.Tensor | None:
        """The carried ``(T, k)`` top-k, or None."""
        return self._topk

    @property
    def source_layer(self) -> int | None:
        """The layer that computed the carried top-k (None when unknown or nothing is carried)."""
        return self._source

    def reset(self) -> None:
        """Drop the carried top-k (start of a new forward pass)."""
        self._topk, self._source = None, None

    def seed(self, topk: torch.Tensor, *, source_layer: int | None = None) -> None:
        """Carry a top-k produced elsewhere: a previous pipeline stage, or the previous MTP step."""
        self._topk, self._source = topk, source_layer

    def step(
        self, layer: int, compute: Callable[[], torch.Tensor], *, num_rows: int | None = None
    ) -> torch.Tensor:
        """Run or reuse the indexer for ``layer`` and return the top-k it attends with.

        Args:
            layer: the layer about to run attention.
            compute: runs this layer's indexer, returning ``(T, k)`` int32 top-k.
            num_rows: the layer's token count T, when known; a carried top-k must match it.

        Returns:
            ``(T, k)`` top-k indices: freshly computed, or the carried ones.

        Raises:
            CarryError: shared layer with nothing carried, carried top-k from the wrong layer, or
                a row count that disagrees with ``num_rows``.
        """
        if should_run_indexer(self.schedule, layer, carried=self._topk is not None):
            topk = compute()
            source = layer
        else:
            topk = self._reuse(layer, num_rows)
            source = self._source
        if self.schedule.next_layer_reuses(layer):
            self._topk, self._source = topk, source
        else:
            self.reset()
        return topk

    def _reuse(self, layer: int, num_rows: int | None) -> torch.Tensor:
        assert self._topk is not None  # should_run_indexer raised otherwise
        if not self.schedule.is_nextn(layer):
            want = self.schedule.source_layer(layer)
            if self._source is not None and self._source != want:
                raise CarryError(
                    f"layer {layer} must reuse layer {want}'s top-k but the carry holds layer "
                    f"{self._source}'s. Fix: step every layer in order, or seed the carry with "
                    f"source_layer={want}."
                )
        if num_rows is not None and self._topk.shape[0] != num_rows:
            raise CarryError(
                f"layer {layer} has {num_rows} token rows but the carried top-k has "
                f"{self._topk.shape[0]} rows (shape {tuple(self._topk.shape)}). Fix: carry the "
                f"top-k of this rank's own rows (localise all-gathered rows before reuse)."
            )
        return self._topk
