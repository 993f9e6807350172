"""The int32 workspace ``plan_slots`` writes: every output but the inverse, in one allocation.

One allocation instead of six keeps the planner's host cost down; the outputs are views of it.
"""

from __future__ import annotations

import torch

__all__ = ["plan_outputs", "split_workspace", "workspace_size"]


def workspace_size(bsz: int, width: int, max_slots: int) -> int:
    """int32 entries: pages (B*M), lens (4*B), slot table (B*M), slot page and owner (S each),
    info (3)."""
    return 2 * bsz * width + 4 * bsz + 2 * max_slots + 3


def split_workspace(
    workspace: torch.Tensor, bsz: int, width: int, max_slots: int
) -> tuple[torch.Tensor, ...]:
    """Views ``(pages (B, M), lens (4, B), slot_table (B, M), slot_page (S,), slot_owner (S,),
    info (3,))`` of the workspace, in that order (the CUDA kernel uses the same offsets)."""
    sizes = (bsz * width, 4 * bsz, bsz * width, max_slots, max_slots, 3)
    pages, lens, table, slot_page, slot_owner, info = torch.split(workspace, sizes)
    return (
        pages.view(bsz, width),
        lens.view(4, bsz),
        table.view(bsz, width),
        slot_page,
        slot_owner,
        info,
    )


def plan_outputs(
    workspace: torch.Tensor, inverse: torch.Tensor, bsz: int, width: int, max_slots: int
) -> tuple[torch.Tensor, ...]:
    """The ``plan_slots`` contract tuple (``cpkv_runtime._backend``) as views of the workspace
    and of ``inverse``'s first ``bsz`` rows (row ``bsz`` is the kernel's scratch)."""
    pages, lens, table, slot_page, slot_owner, info = split_workspace(
        workspace, bsz, width, max_slots
    )
    prefix, extend, seq, pages_used = lens.unbind(0)
    return (
        pages,
        prefix,
        extend,
        seq,
        pages_used,
        table,
        slot_page,
        slot_owner,
        inverse[:bsz],
        info[0:1],
        info[1:2],
        info,
    )
