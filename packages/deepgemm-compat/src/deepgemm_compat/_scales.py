"""Scale tensors handed back by the wheel: stride repair and ownership.

Releases up to 0.2.2 return tensors through tvm-ffi, i.e. DLPack. For an MN-major,
TMA-aligned scale tensor whose last dim is 1 (K <= 128 with 1x128 scaling), the exporter
normalises that size-1 dim's stride to 1, and DeepGEMM, which checks
``sf.stride(-1) == tma_aligned(mn)``, then rejects or misreads it. The data is right;
only the stride is not, so the tensor is rebuilt with ``as_strided``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepgemm_compat._surface import DLPACK_RETURNS_UNTIL, surface
from deepgemm_compat.errors import InputError

if TYPE_CHECKING:
    import torch


def tma_aligned_size(mn: int, element_size: int) -> int:
    """``mn`` rounded up so that ``mn * element_size`` is a multiple of 16 bytes (TMA)."""
    if element_size <= 0 or 16 % element_size:
        raise InputError(f"element_size must divide 16 bytes, got {element_size}")
    step = 16 // element_size
    return (mn + step - 1) // step * step


def repair_scale_strides(sf: torch.Tensor) -> torch.Tensor:
    """Give an MN-major scale tensor with last dim 1 the TMA-aligned strides DeepGEMM expects.

    Args:
        sf: ``(mn, k)`` or ``(groups, mn, k)`` scales, MN-major (``stride(-2) == 1``);
            read-only, the result is a view of the same storage.

    Returns:
        ``sf`` itself when nothing needs fixing (k != 1, K-major, or strides already
        ``(..., 1, tma_aligned(mn))``); else a view with strides
        ``(tma_aligned(mn) * k, 1, tma_aligned(mn))`` (3-D) or ``(1, tma_aligned(mn))`` (2-D).
    """
    if sf.dim() not in (2, 3):
        raise InputError(f"scale tensor must be 2-D or 3-D, got shape {tuple(sf.shape)}")
    mn, k = sf.shape[-2], sf.shape[-1]
    if k != 1 or (sf.stride(-2) != 1 and mn > 1):
        return sf
    aligned = tma_aligned_size(mn, sf.element_size())
    want = (1, aligned) if sf.dim() == 2 else (aligned * k, 1, aligned)
    if tuple(sf.stride()) == want or (
        sf.dim() == 3 and sf.shape[0] == 1 and sf.stride()[1:] == want[1:]
    ):
        return sf
    needed = (
        sf.storage_offset() + (sf.shape[0] - 1) * want[0] + mn
        if sf.dim() == 3
        else sf.storage_offset() + mn
    )
    if needed > sf.untyped_storage().nbytes() // sf.element_size():
        raise InputError(
            f"scale tensor {tuple(sf.shape)} with strides {tuple(sf.stride())} has no room for "
            f"TMA-aligned strides {want}; build it with deep_gemm's layout helpers"
        )
    return sf.as_strided(sf.shape, want, sf.storage_offset())


def tma_aligned_scales(sf: torch.Tensor) -> torch.Tensor:
    """FP32 scales in the MN-major, TMA-aligned layout, repaired and safely owned.

    Calls the wheel's ``get_mn_major_tma_aligned_tensor``; on <= 0.2.2 repairs the stride
    of a last dim of 1. Where the wheel hands back a non-owning alias of ``sf`` (its fast
    path when ``sf`` is already in layout), returns ``sf`` itself so that rebinding
    ``x = tma_aligned_scales(x)`` cannot free the storage under a pending GEMM.

    Args:
        sf: ``(mn, k)`` or ``(groups, mn, k)`` float32 on CUDA.
    """
    s = surface()
    out = s.require("tma_aligned_scales")(sf)
    if out.data_ptr() == sf.data_ptr() and out.shape == sf.shape and out.stride() == sf.stride():
        out = sf
    if s.version <= DLPACK_RETURNS_UNTIL:
        out = repair_scale_strides(out)
    return out
