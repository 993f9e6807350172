"""Import ``deep_gemm`` once, after the checks, and turn every failure into one clear error.

What goes wrong at ``import deep_gemm`` and what it looks like:

* the CUDA runtime libraries are absent (a CPU build of torch): ``OSError:
  libcudart.so.13: cannot open shared object file`` from loading ``_C.so``;
* no CUDA toolkit: ``AssertionError`` from ``find_cuda_home()`` (DeepGEMM compiles
  its kernels at run time, so it wants ``nvcc``);
* torch ABI mismatch: ``undefined symbol: _ZN3c10...`` (an ``OSError`` or ``RuntimeError``);
* <= 0.2.2 without apache-tvm-ffi: ``ModuleNotFoundError: No module named 'tvm_ffi'``.

With the runtime libraries and toolkit present but no driver or GPU, the import succeeds
and the first kernel fails; ``require_cuda()`` checks for a device before any launch.
"""

from __future__ import annotations

import importlib
import re
import threading
from types import ModuleType

from cpkv_cli.environment import DEEPGEMM_COMPAT_SKIP_CHECKS

from deepgemm_compat import _detect
from deepgemm_compat.errors import (
    CudaUnavailableError,
    DeepGemmUnavailable,
    InputError,
    TorchAbiMismatchError,
    TvmFfiMissingError,
    UntestedVersionError,
    WheelMissingError,
)

SKIP_CHECKS_ENV = "DEEPGEMM_COMPAT_SKIP_CHECKS"

_ERRORS: dict[str, type[DeepGemmUnavailable]] = {
    "missing": WheelMissingError,
    "torch-abi": TorchAbiMismatchError,
    "tvm-ffi": TvmFfiMissingError,
    "untested": UntestedVersionError,
    "no-cuda": CudaUnavailableError,
}
_CUDA_LIBS = re.compile(r"lib(cuda|cudart|nvrtc|cublas|cublasLt|nvJitLink)\.so")

_lock = threading.Lock()
_module: ModuleType | None = None


def _quick() -> tuple[bool, str]:
    """(AVAILABLE, MISSING_MESSAGE) from metadata alone: fast enough for import time, and never
    raising there (a bad ``DEEPGEMM_COMPAT_ALLOW_UNTESTED`` is the message; ``load()`` and the
    command refuse it)."""
    try:
        env = _detect.collect(check_symbols=False, providers=False)
    except InputError as exc:
        return False, str(exc)
    blocking = [p for p in _detect.diagnose(env) if p.blocking]
    if blocking:
        return False, f"{blocking[0].message}; fix: {blocking[0].fix}"
    return True, _detect.install_line(env.torch_version)


AVAILABLE, MISSING_MESSAGE = _quick()


def classify_import_error(exc: BaseException, env: _detect.Environment) -> DeepGemmUnavailable:
    """Map an exception raised by ``import deep_gemm`` to the error that names its fix."""
    text = str(exc)
    fix_install = _detect.install_line(env.torch_version)
    if isinstance(exc, ModuleNotFoundError) and exc.name == "tvm_ffi":
        row = _detect.pairing_for(env.deep_gemm_version or "0.0.1")
        pin = row[4] if row and row[4] else "0.1.11"
        return TvmFfiMissingError(
            f"sgl-deep-gemm {env.deep_gemm_version} imports tvm_ffi, which is not installed",
            f'pip install "apache-tvm-ffi=={pin}"',
        )
    if isinstance(exc, ModuleNotFoundError) and exc.name == "deep_gemm":
        return WheelMissingError("sgl-deep-gemm is not installed", fix_install)
    if "undefined symbol" in text:
        return TorchAbiMismatchError(
            f"sgl-deep-gemm {env.deep_gemm_version} does not match torch {env.torch_version} "
            f"({text.strip()})",
            fix_install,
        )
    if isinstance(exc, OSError) and _CUDA_LIBS.search(text):
        return CudaUnavailableError(
            f"importing deep_gemm raised OSError: {text.strip()} (no CUDA runtime here)",
            "use a CUDA 13 build of torch (its nvidia-*-cu13 wheels bring libcudart.so.13, "
            "libnvrtc.so.13 and libcublas.so.13) on a host with an NVIDIA driver",
        )
    if isinstance(exc, AssertionError):
        return CudaUnavailableError(
            "importing deep_gemm failed in find_cuda_home(): no CUDA toolkit found",
            "install the CUDA toolkit (DeepGEMM compiles kernels with nvcc at run time) "
            "or set CUDA_HOME",
        )
    return DeepGemmUnavailable(
        f"importing deep_gemm {env.deep_gemm_version} raised {type(exc).__name__}: {text}",
        "run `deepgemm-compat doctor` for the full report",
    )


def load(force: bool = False) -> ModuleType:
    """Check the environment, then import and return ``deep_gemm`` (cached).

    Raises:
        DeepGemmUnavailable: a subclass naming the cause and ``.fix``. The checks can be
            skipped with ``DEEPGEMM_COMPAT_SKIP_CHECKS=1``; import failures are still mapped.
    """
    global _module
    with _lock:
        if _module is not None and not force:
            return _module
        env = _detect.collect(check_symbols=True)
        if not DEEPGEMM_COMPAT_SKIP_CHECKS.read(error=InputError):
            for p in _detect.diagnose(env):
                if p.blocking:
                    raise _ERRORS.get(p.code, DeepGemmUnavailable)(p.message, p.fix)
        try:
            _module = importlib.import_module("deep_gemm")
        except (ImportError, OSError, RuntimeError, AssertionError) as exc:
            raise classify_import_error(exc, env) from exc
        return _module


def use_module(module: ModuleType | None) -> None:
    """Make the facade use ``module`` as ``deep_gemm`` (``None`` resets to ``load()``).

    For callers that imported deep_gemm themselves, and for the CPU tests' stand-ins.
    """
    global _module
    with _lock:
        _module = module


def require_cuda() -> None:
    """Raise CudaUnavailableError unless torch sees a CUDA device (checked before launches)."""
    import torch

    if not torch.cuda.is_available():
        raise CudaUnavailableError(
            f"no CUDA device is visible to torch {torch.__version__}; "
            "every DeepGEMM kernel needs an SM90/SM100 GPU",
            "run on a GPU host (check nvidia-smi and CUDA_VISIBLE_DEVICES)",
        )
