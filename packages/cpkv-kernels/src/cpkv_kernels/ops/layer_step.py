"""layer_step: one layer of ``cpkv_runtime.LayerStep``, build_dense then remap_locs."""

from __future__ import annotations

import torch

from .build_dense import launch_build_dense
from .remap_locs import launch_remap_locs


def launch_layer_step(
    kv_pool: torch.Tensor,
    slot_page: torch.Tensor,
    current_kv: torch.Tensor,
    sources: torch.Tensor,
    used_slots: torch.Tensor | None,
    dense: torch.Tensor,
    locs: torch.Tensor,
    row_req: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    dense_locs: torch.Tensor,
) -> None:
    """The launcher of :func:`layer_step_triton` (same arguments), without the custom-op layer:
    the two kernels' launchers back to back."""
    launch_build_dense(kv_pool, slot_page, current_kv, sources, used_slots, dense)
    launch_remap_locs(locs, row_req, inverse, page_size, dense_locs)


@torch.library.custom_op("cpkv::layer_step_triton", mutates_args=("dense", "dense_locs"))
def layer_step_triton(
    kv_pool: torch.Tensor,
    slot_page: torch.Tensor,
    current_kv: torch.Tensor,
    sources: torch.Tensor,
    used_slots: torch.Tensor | None,
    dense: torch.Tensor,
    locs: torch.Tensor,
    row_req: torch.Tensor,
    inverse: torch.Tensor,
    page_size: int,
    dense_locs: torch.Tensor,
) -> None:
    """Build this layer's dense buffer and remap its top-k into it.

    Args:
        kv_pool, slot_page, current_kv, sources, used_slots: as in ``build_dense_triton``.
        dense: (S, P, *row), written (``build_dense_triton``'s ``out``).
        locs: (N,) or (N, K) int32/int64 pool locations, -1 = absent. Read-only.
        row_req: (N,) int32/int64 request of each row.
        inverse: (B, num_pages) int32 per-request inverse.
        page_size: P.
        dense_locs: int32 of ``locs``' shape, written.
    """
    launch_layer_step(
        kv_pool, slot_page, current_kv, sources, used_slots, dense,
        locs, row_req, inverse, page_size, dense_locs,
    )  # fmt: skip


@layer_step_triton.register_fake
def _(
    kv_pool, slot_page, current_kv, sources, used_slots, dense,
    locs, row_req, inverse, page_size, dense_locs,
):  # fmt: skip
    return None
