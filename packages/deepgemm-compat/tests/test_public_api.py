"""The public boundary: `__all__` lists exactly the public names."""

from __future__ import annotations

import deepgemm_compat
from deepgemm_compat import warmup

EXPECTED = {
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
}


def test_all_is_exactly_the_public_names():
    assert set(deepgemm_compat.__all__) == EXPECTED
    assert len(deepgemm_compat.__all__) == len(EXPECTED)
    public = {n for n in vars(deepgemm_compat) if not n.startswith("_")} - {
        "errors",
        "warmup",
        "cli",
    }
    assert public == EXPECTED


def test_warmup_module_all():
    assert {n for n in warmup.__all__} == {n for n in vars(warmup) if not n.startswith("_")} - {
        "annotations",
        "time",
        "Callable",
        "dataclass",
        "field",
    }


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, deepgemm_compat; print('torch' in sys.modules, 'deep_gemm' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_error_tree():
    e = deepgemm_compat
    for cls in (
        e.WheelMissingError,
        e.TorchAbiMismatchError,
        e.TvmFfiMissingError,
        e.CudaUnavailableError,
        e.UntestedVersionError,
    ):
        assert issubclass(cls, e.DeepGemmUnavailable) and issubclass(cls, ImportError)
    assert issubclass(e.InputError, ValueError) and issubclass(
        e.UnsupportedFeatureError, NotImplementedError
    )
    assert issubclass(e.KernelPackageError, RuntimeError)
    assert all(
        issubclass(c, e.DeepGemmCompatError)
        for c in (
            e.DeepGemmUnavailable,
            e.InputError,
            e.UnsupportedFeatureError,
            e.KernelPackageError,
        )
    )
