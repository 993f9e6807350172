"""PDL, compile mode, scale-stride repair and the kernel-package check."""

from __future__ import annotations

import deepgemm_compat as dgc
import pytest
import torch
from deepgemm_compat import _kernel_pkg, _pdl

# ---- PDL --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("", True),
        ("1", True),
        ("TRUE", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("Off", False),
        ("no", False),
    ],
)
def test_pdl_env(raw, want):
    assert dgc.pdl_from_env({"SGLANG_DEEPGEMM_PDL": raw}) is want
    assert dgc.pdl_from_env({}) is True


def test_pdl_env_garbage_is_refused():
    with pytest.raises(ValueError, match=r"SGLANG_DEEPGEMM_PDL='maybe' is not a boolean"):
        dgc.pdl_from_env({"SGLANG_DEEPGEMM_PDL": "maybe"})


@pytest.mark.parametrize(
    ("version", "via"),
    [
        ("0.1.0", None),
        ("0.1.1", "_C.set_pdl"),
        ("0.1.2", "_C.set_pdl"),
        ("0.1.4.post1", "set_pdl"),
        ("0.2.5", "set_pdl"),
    ],
)
def test_pdl_switch_per_release(standin, version, via):
    state = standin(version)
    res = _pdl.set_pdl_switch(dgc.surface(), True)
    assert res.via == via and res.applied is (via is not None)
    assert state.pdl is (via is not None)
    if via is None:
        assert "0.1.1" in res.note and dgc.get_pdl() is None
    else:
        assert dgc.get_pdl() is True
        _pdl.set_pdl_switch(dgc.surface(), False)
        assert dgc.get_pdl() is False


def test_apply_pdl_needs_a_cuda_device(standin):
    standin("0.1.4.post1")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present (covered by test_gpu_dgc_facade.py)")
    with pytest.raises(dgc.CudaUnavailableError):
        dgc.apply_pdl(0)


def test_compile_mode_is_a_no_op_everywhere(family):
    _, state = family
    with dgc.compile_mode(1) as switched:
        assert switched is False
    assert state.calls == []


# ---- scale strides ----------------------------------------------------------------------


def mn_major(mn: int, k: int, groups: int | None = None) -> torch.Tensor:
    # Filled, not torch.empty: stale memory can hold NaNs, which torch.equal never matches.
    aligned = dgc._scales.tma_aligned_size(mn, 4)
    if groups is None:
        return torch.rand((k, aligned)).t()[:mn]
    return torch.rand((groups, k, aligned)).transpose(1, 2)[:, :mn]


def test_tma_aligned_size():
    assert [dgc._scales.tma_aligned_size(m, 4) for m in (1, 4, 5, 130)] == [4, 4, 8, 132]
    with pytest.raises(dgc.InputError, match="divide 16"):
        dgc._scales.tma_aligned_size(8, 3)


@pytest.mark.parametrize("groups", [None, 3])
def test_repair_restores_the_tma_stride_of_a_size_one_k(groups):
    good = mn_major(130, 1, groups)
    assert good.stride()[-2:] == (1, 132)
    broken = good.as_strided(good.shape, (*good.stride()[:-1], 1))  # what DLPack hands back
    fixed = dgc.repair_scale_strides(broken)
    assert fixed.stride() == good.stride() and fixed.data_ptr() == good.data_ptr()
    assert torch.equal(fixed, good)


def test_repair_leaves_correct_or_other_layouts_alone():
    for t in (mn_major(130, 1), mn_major(130, 4), mn_major(5, 1, 2), torch.empty((130, 4))):
        assert dgc.repair_scale_strides(t) is t


def test_contiguous_mn_by_1_gets_the_tma_stride_as_a_view():
    t = torch.randn((130, 1))  # strides (1, 1): the shape DLPack produces
    fixed = dgc.repair_scale_strides(t)
    assert fixed.stride() == (1, 132) and torch.equal(fixed, t) and fixed.data_ptr() == t.data_ptr()


def test_repair_refuses_storage_without_room():
    t = torch.empty(3 * 130).as_strided((3, 130, 1), (130, 1, 1))  # packed groups, no padding
    with pytest.raises(dgc.InputError, match="no room for TMA-aligned strides"):
        dgc.repair_scale_strides(t)
    with pytest.raises(dgc.InputError, match="2-D or 3-D"):
        dgc.repair_scale_strides(torch.empty(4))


def test_tma_aligned_scales_keeps_ownership(standin):
    state = standin("0.2.2")
    sf = mn_major(64, 2)
    assert dgc.tma_aligned_scales(sf) is sf  # the wheel's fast path aliases its input
    assert state.named("get_mn_major_tma_aligned_tensor")


# ---- kernel package ---------------------------------------------------------------------


def test_kernel_package_installed_here_meets_the_default():
    found = dgc.check_kernel_package()
    assert found.ok and found.name == "sglang-kernel" and found.minimum == "0.4.9"


def test_kernel_package_below_minimum(monkeypatch):
    monkeypatch.delenv(_kernel_pkg.SKIP_ENV, raising=False)
    with pytest.raises(
        dgc.KernelPackageError,
        match=r"older than the minimum 99\.0.*pip install \"sglang-kernel>=99\.0\"",
    ):
        dgc.check_kernel_package("99.0")
    monkeypatch.setenv(_kernel_pkg.MIN_ENV, "98.0")
    assert dgc.find_kernel_package().minimum == "98.0"
    monkeypatch.setenv(_kernel_pkg.SKIP_ENV, "1")
    assert dgc.check_kernel_package().ok is False


def test_kernel_package_absent(monkeypatch):
    monkeypatch.setattr(_kernel_pkg, "DIST_NAMES", ("no-such-kernel-dist",))
    monkeypatch.delenv(_kernel_pkg.SKIP_ENV, raising=False)
    with pytest.raises(dgc.KernelPackageError, match="neither no-such-kernel-dist"):
        dgc.check_kernel_package()
