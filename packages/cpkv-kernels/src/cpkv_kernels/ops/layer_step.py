"""layer_step: one layer of ``cpkv_runtime.LayerStep``, build_dense then remap_locs."""

from __future__ import annotations

from ._register import triton_op
from .build_dense import launch_build_dense
from .remap_locs import launch_remap_locs


def launch_layer_step(kv_pool, slot_page, current_kv, sources, used_slots, dense, *remap) -> None:
    """Build this layer's dense buffer and remap its top-k into it (arguments: the contract's
    ``layer_step``: ``build_dense``'s, ``dense`` its ``out``, then ``remap_locs``' ``locs,
    row_req, inverse, page_size, dense_locs``): the two launchers back to back, under
    ``cpkv::layer_step_triton`` and called bare by ``cpkv_runtime.LayerStep``."""
    launch_build_dense(kv_pool, slot_page, current_kv, sources, used_slots, dense)
    launch_remap_locs(*remap)


layer_step_triton = triton_op("layer_step", launch_layer_step)
