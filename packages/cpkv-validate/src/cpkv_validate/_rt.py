"""What the harness adds to ``cpkv_runtime``: the legacy inverse fixture and the CP groups.

Everything KV-related the reference engine does goes through ``cpkv_runtime`` (and so through
whichever backend its dispatcher picks: ``cuda > triton > torch``). The only layout built here is
the *legacy* value-keyed inverse, kept as a fixture that must make the harness fail; the
communicators wrap ``torch.distributed`` (or nothing, at cp 1) for the engine.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from cpkv_runtime import Layout

__all__ = ["DistComm", "LocalComm", "legacy_conflicts", "legacy_layout"]


def legacy_layout(layout: Layout) -> Layout:
    """The old bug as a fixture: a value-keyed 1-D inverse, last writer wins, shared by all.

    ``inverse[page] = slot`` is built by scanning ``(b, j)`` in order, so when two requests list
    one pool page with different slots (one of them writes it), every request is sent to the
    last one's slot — reading, and writing its current KV into, another request's slot.

    Returns:
        ``layout`` with ``inverse`` replaced by the 1-D value-keyed one broadcast to (B, pages).
    """
    flat = torch.full((layout.num_pages,), -1, dtype=torch.int32, device=layout.device)
    used = layout.slot_table >= 0
    pages = layout.req_pages[used].long()
    slots = layout.slot_table[used]
    # Row-major scan order; index_put_ with accumulate=False is last-writer-wins only on some
    # backends, so resolve "last" explicitly: keep the highest scan index per page.
    order = torch.arange(pages.shape[0], device=layout.device)
    last = torch.full((layout.num_pages,), -1, dtype=torch.long, device=layout.device)
    last.scatter_reduce_(0, pages, order, reduce="amax")
    hit = last >= 0
    flat[hit] = slots[last[hit]]
    # A request that does not list a page still has no entry for it: exactly where the
    # per-request inverse has none.
    inverse = torch.where(layout.inverse >= 0, flat.unsqueeze(0), -1)
    return dataclasses.replace(layout, inverse=inverse.to(layout.inverse.dtype))


def legacy_conflicts(layout: Layout) -> int:
    """How many ``(b, page)`` entries the legacy inverse sends to another slot than b's own."""
    return int((legacy_layout(layout).inverse != layout.inverse).sum())


class LocalComm:
    """A one-rank "process group" (cp = 1): collectives are identities."""

    rank = 0
    world = 1

    def all_gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x]

    def all_gather_object(self, obj: object) -> list[object]:
        return [obj]

    def barrier(self) -> None:
        return None


class DistComm:
    """The default ``torch.distributed`` group (gloo on CPU, NCCL on CUDA)."""

    def __init__(self) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def all_gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = x.contiguous()
        out = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(out, x)
        return out

    def all_gather_object(self, obj: object) -> list[object]:
        out: list[object] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()
