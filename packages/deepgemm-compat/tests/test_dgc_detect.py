"""Detection before import: every bad environment gives one message and one fix."""

from __future__ import annotations

import ctypes
import importlib

import deepgemm_compat as dgc
import pytest
from deepgemm_compat import _detect, _elf, _load
from deepgemm_compat._detect import Environment, diagnose


def env(**kw) -> Environment:
    base = {
        "deep_gemm_version": "0.1.4.post1",
        "torch_version": "2.11.0+cu130",
        "tvm_ffi_version": "0.1.11",
    }
    return Environment(**{**base, **kw})


def codes(problems) -> list[tuple[str, bool]]:
    return [(p.code, p.blocking) for p in problems]


def test_verified_pairing_has_no_problem():
    assert diagnose(env()) == []
    assert (
        diagnose(env(deep_gemm_version="0.2.3.post2", torch_version="2.14.1", tvm_ffi_version=None))
        == []
    )


def test_missing_wheel_names_the_install_line():
    (p,) = diagnose(env(deep_gemm_version=None))
    assert (
        p.code == "missing"
        and p.fix == 'pip install "sgl-deep-gemm==0.1.4.post1" "apache-tvm-ffi==0.1.11"'
    )


def test_missing_torch():
    (p,) = diagnose(env(torch_version=None))
    assert p.code == "missing" and "torch" in p.message


@pytest.mark.parametrize(
    ("dg", "torch", "fix"),
    [
        ("0.1.4.post1", "2.14.1", 'pip install "sgl-deep-gemm==0.2.3.post2"'),
        (
            "0.1.5.post2",
            "2.11.0",
            'pip install "sgl-deep-gemm==0.1.4.post1" "apache-tvm-ffi==0.1.11"',
        ),
        ("0.2.0", "2.14.1", 'pip install "sgl-deep-gemm==0.2.3.post2"'),
        ("0.2.5", "2.13.0", 'pip install "sgl-deep-gemm==0.2.1" "apache-tvm-ffi==0.1.11"'),
    ],
)
def test_torch_abi_mismatch_from_the_table(dg, torch, fix):
    problems = diagnose(env(deep_gemm_version=dg, torch_version=torch))
    (p,) = [p for p in problems if p.code == "torch-abi"]
    assert p.blocking and p.fix == fix and dg in p.message and torch in p.message


def test_symbol_check_overrides_the_table():
    problems = diagnose(
        env(
            missing_symbols=["_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE"],
            torch_version="2.14.1",
        )
    )
    (p,) = problems
    assert (
        p.code == "torch-abi"
        and "1 symbol(s)" in p.message
        and "materialize_cow_storage" in p.message
    )
    # symbols resolve although the table disagrees: no finding
    assert diagnose(env(torch_version="2.14.1", missing_symbols=[])) == []


def test_tvm_ffi_missing_and_mispinned():
    (p,) = diagnose(env(tvm_ffi_version=None))
    assert (p.code, p.blocking, p.fix) == ("tvm-ffi", True, 'pip install "apache-tvm-ffi==0.1.11"')
    (p,) = diagnose(env(deep_gemm_version="0.1.2", tvm_ffi_version="0.1.11"))
    assert (p.code, p.blocking, p.fix) == ("tvm-ffi", False, 'pip install "apache-tvm-ffi==0.1.9"')
    assert (
        diagnose(env(deep_gemm_version="0.2.3", torch_version="2.14.0", tvm_ffi_version=None)) == []
    )


def test_untested_newer_release_blocks_unless_allowed():
    e = env(deep_gemm_version="0.3.0", torch_version="2.14.1")
    assert codes(diagnose(e)) == [("untested", True)]
    assert "DEEPGEMM_COMPAT_ALLOW_UNTESTED=1" in diagnose(e)[0].fix
    assert codes(
        diagnose(env(deep_gemm_version="0.3.0", torch_version="2.14.1", allow_untested=True))
    ) == [("untested", False)]


def test_two_distributions_providing_deep_gemm():
    problems = diagnose(env(providers=["sgl-deep-gemm", "sgl-kernel"]))
    assert codes(problems) == [("conflict", False)]
    assert problems[0].fix.startswith("pip uninstall sgl-kernel")


def test_install_line_per_torch():
    assert _detect.install_line("2.14.1") == 'pip install "sgl-deep-gemm==0.2.3.post2"'
    assert _detect.install_line("2.12.1+cu130").endswith('"apache-tvm-ffi==0.1.11"')
    assert _detect.install_line("2.9.0").startswith("# no sgl-deep-gemm wheel")
    assert _detect.install_line(None) == 'pip install "sgl-deep-gemm==0.2.3.post2"'


def test_loader_kind():
    assert _detect.loader_kind("0.2.2") == "tvm_ffi"
    assert _detect.loader_kind("0.2.3") == "torch_library"
    assert _detect.loader_kind("9.0") == "torch_library" and _detect.loader_kind(None) is None


# ---- the real environment of this machine ----------------------------------------------


def test_collect_reads_the_real_installation():
    e = _detect.collect(check_symbols=True)
    assert e.deep_gemm_version and e.torch_version and e.so_path and e.torch_lib_dir
    assert e.providers == ["sgl-deep-gemm"]
    # the installed pair is the one SGLang pins; the real ELF check must find every symbol
    assert e.missing_symbols == []


def test_elf_reader_on_real_libraries():
    e = _detect.collect(check_symbols=False)
    defined, undefined = _elf.dynamic_symbols(e.so_path)
    assert _elf.torch_symbols(undefined) and not _elf.torch_symbols(defined) - defined


def test_elf_reader_refuses_non_elf(tmp_path):
    f = tmp_path / "x.so"
    f.write_bytes(b"not an elf file at all, just bytes" * 4)
    with pytest.raises(ValueError, match="ELF64"):
        _elf.dynamic_symbols(f)


def test_available_and_missing_message_are_exported():
    assert isinstance(dgc.AVAILABLE, bool)
    assert "pip install" in dgc.MISSING_MESSAGE


def test_load_imports_the_real_wheel_and_require_cuda_names_the_fix():
    try:
        module = _load.load(force=True)
        assert module.__name__ == "deep_gemm"
    finally:
        _load.use_module(None)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(dgc.CudaUnavailableError, match="no CUDA device") as info:
        dgc.require_cuda()
    assert "nvidia-smi" in info.value.fix


# ---- import failures, mapped from real exceptions --------------------------------------


def real_oserror(soname: str) -> OSError:
    try:
        ctypes.CDLL(soname)
    except OSError as exc:
        return exc
    pytest.skip(f"{soname} loads here")


def test_missing_cuda_runtime_oserror_maps_to_no_cuda():
    err = _load.classify_import_error(real_oserror("libcudart.so.99"), env())
    assert isinstance(err, dgc.CudaUnavailableError) and isinstance(err, ImportError)
    assert "OSError" in str(err) and "libcudart.so.13" in err.fix


def test_missing_module_errors_map_to_their_fix():
    try:
        importlib.import_module("tvm_ffi_not_installed_anywhere")
    except ModuleNotFoundError as exc:
        exc.name = "tvm_ffi"  # the name the wheel's `import tvm_ffi` reports
        err = _load.classify_import_error(exc, env())
    assert (
        isinstance(err, dgc.TvmFfiMissingError)
        and err.fix == 'pip install "apache-tvm-ffi==0.1.11"'
    )


def test_undefined_symbol_maps_to_torch_abi():
    try:
        ctypes.CDLL(None).__getattr__(
            "_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE_nope"
        )
    except AttributeError as exc:
        err = _load.classify_import_error(
            OSError(f"_C.so: undefined symbol: {exc}"), env(torch_version="2.14.1")
        )
    assert isinstance(err, dgc.TorchAbiMismatchError) and "0.2.3.post2" in err.fix


def test_missing_toolkit_assertion_maps_to_no_cuda():
    err = _load.classify_import_error(AssertionError(), env())
    assert isinstance(err, dgc.CudaUnavailableError) and "CUDA_HOME" in err.fix


def test_blocking_problem_stops_load_before_import(monkeypatch):
    """A torch mismatch found by the checks raises before `import deep_gemm` is tried."""
    mismatched = env(
        deep_gemm_version="0.1.4.post1", torch_version="2.14.1", missing_symbols=["_ZN3c10x"]
    )
    monkeypatch.setattr(_detect, "collect", lambda **_: mismatched)
    monkeypatch.delenv(_load.SKIP_CHECKS_ENV, raising=False)
    _load.use_module(None)
    with pytest.raises(dgc.TorchAbiMismatchError) as info:
        _load.load(force=True)
    assert info.value.fix == 'pip install "sgl-deep-gemm==0.2.3.post2"'
    assert "fix: pip install" in str(info.value)
