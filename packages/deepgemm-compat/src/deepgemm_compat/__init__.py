"""A stable facade over every sgl-deep-gemm wheel, plus a CP-aware warmup planner.

``AVAILABLE`` is True when the pre-import checks pass (installed, torch pairing, tvm-ffi);
``MISSING_MESSAGE`` then names the exact ``pip install`` line. Importing this package never
imports ``deep_gemm`` or ``torch``; ``load()`` does, on first use of the facade.
"""

from deepgemm_compat._detect import PAIRING, collect, diagnose, install_line
from deepgemm_compat._facade import get_paged_mqa_logits_metadata, mqa_logits, paged_mqa_logits
from deepgemm_compat._gemm import (
    MaskedGemmResult,
    fp8_gemm_nt,
    grouped_gemm_contiguous,
    grouped_gemm_masked,
)
from deepgemm_compat._kernel_pkg import KernelPackage, check_kernel_package, find_kernel_package
from deepgemm_compat._load import AVAILABLE, MISSING_MESSAGE, load, require_cuda, use_module
from deepgemm_compat._pdl import PdlResult, apply_pdl, compile_mode, get_pdl, pdl_from_env
from deepgemm_compat._scales import repair_scale_strides, tma_aligned_scales
from deepgemm_compat._schedule import ScheduleCache, current_num_sms, num_sms_scope
from deepgemm_compat._surface import RENAMES, Surface, surface
from deepgemm_compat.errors import (
    CudaUnavailableError,
    DeepGemmCompatError,
    DeepGemmUnavailable,
    InputError,
    KernelPackageError,
    TorchAbiMismatchError,
    TvmFfiMissingError,
    UnsupportedFeatureError,
    UntestedVersionError,
    WheelMissingError,
)

# Grouped by role (environment, ops, runtime switches, errors), not alphabetically.
__all__ = [  # noqa: RUF022
    # Environment
    "AVAILABLE",
    "MISSING_MESSAGE",
    "PAIRING",
    "collect",
    "diagnose",
    "install_line",
    "load",
    "require_cuda",
    "use_module",
    # Ops
    "MaskedGemmResult",
    "fp8_gemm_nt",
    "get_paged_mqa_logits_metadata",
    "grouped_gemm_contiguous",
    "grouped_gemm_masked",
    "mqa_logits",
    "paged_mqa_logits",
    "repair_scale_strides",
    "tma_aligned_scales",
    # Runtime switches
    "RENAMES",
    "KernelPackage",
    "PdlResult",
    "ScheduleCache",
    "Surface",
    "apply_pdl",
    "check_kernel_package",
    "compile_mode",
    "current_num_sms",
    "find_kernel_package",
    "get_pdl",
    "num_sms_scope",
    "pdl_from_env",
    "surface",
    # Errors
    "CudaUnavailableError",
    "DeepGemmCompatError",
    "DeepGemmUnavailable",
    "InputError",
    "KernelPackageError",
    "TorchAbiMismatchError",
    "TvmFfiMissingError",
    "UnsupportedFeatureError",
    "UntestedVersionError",
    "WheelMissingError",
]
