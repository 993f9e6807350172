"""Triton implementations, each registered as the custom op ``cpkv::<op>_triton``."""

from .build_dense import build_dense_triton
from .build_inverse import build_inverse_triton
from .current_page_mask import current_page_mask_triton
from .fill_current import fill_current_triton
from .fill_sources import fill_sources_triton
from .layer_step import layer_step_triton
from .materialize import materialize_triton
from .plan_slots import plan_slots_triton
from .remap_locs import remap_locs_triton

__all__ = [
    "build_dense_triton",
    "build_inverse_triton",
    "current_page_mask_triton",
    "fill_current_triton",
    "fill_sources_triton",
    "layer_step_triton",
    "materialize_triton",
    "plan_slots_triton",
    "remap_locs_triton",
]
