"""The facade against stand-ins of each release family (test doubles: the real wheels
need CUDA; every signature comes from tests/fixtures/surfaces.json, read from the wheels).
The same calls run on the real wheel in test_gpu_dgc_facade.py."""

from __future__ import annotations

import deepgemm_compat as dgc
import pytest
import torch
from deepgemm_compat import _schedule
from packaging.version import Version

FP8 = torch.float8_e4m3fn


def paged_inputs(batch: int, next_n: int, heads: int = 64, dim: int = 128, blocks: int = 8):
    q = torch.zeros((batch, next_n, heads, dim), dtype=FP8)
    kv = torch.zeros((blocks, 64, 1, dim + 4), dtype=torch.uint8)
    w = torch.ones((batch * next_n, heads))
    lens = torch.arange(1, batch * next_n + 1, dtype=torch.int32).view(batch, next_n) * 10
    table = torch.zeros((batch, blocks), dtype=torch.int32)
    return q, kv, w, lens, table


def fp8_pair(*shape: int, scale_shape: tuple[int, ...]):
    return torch.zeros(shape, dtype=FP8), torch.ones(scale_shape)


# ---- symbol lookup ---------------------------------------------------------------------


def test_surface_reads_each_symbol_once_per_loaded_module(standin):
    standin("0.2.3.post2")
    s = dgc.surface()
    assert dgc.surface() is s
    assert s.params("fp8_gemm_nt") is s.params("fp8_gemm_nt")  # the signature is read once
    assert list(s.params("fp8_gemm_nt"))[:3] == ["a", "b", "d"]
    standin("0.2.5")
    assert dgc.surface() is not s and dgc.surface().version == Version("0.2.5")


def test_a_missing_symbol_names_what_the_release_lacks(standin):
    standin("0.2.5")
    from deepgemm_compat import _load

    del _load._module.get_num_sms, _load._module.fp8_fp4_mqa_logits
    with pytest.raises(dgc.UnsupportedFeatureError, match=r"0\.2\.5 has no get_num_sms$"):
        dgc.current_num_sms()
    with pytest.raises(
        dgc.UnsupportedFeatureError, match=r"has no fp8_mqa_logits or fp8_fp4_mqa_logits"
    ):
        dgc.mqa_logits(
            torch.zeros((1, 64, 128), dtype=FP8),
            torch.zeros((4, 128), dtype=FP8),
            torch.ones(4),
            torch.ones((1, 64)),
            torch.zeros(1, dtype=torch.int32),
            torch.ones(1, dtype=torch.int32),
        )


# ---- paged MQA logits -------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["per_token_N_total_1", "batch_next_n_2"])
def test_paged_mqa_logits_routes_per_release(family, layout):
    version, state = family
    batch, next_n = (6, 1) if layout == "per_token_N_total_1" else (3, 2)
    q, kv, w, lens, table = paged_inputs(batch, next_n)
    if next_n == 2 and Version(version) < Version("0.1.2"):
        with pytest.raises(dgc.UnsupportedFeatureError, match=r"fixed in 0\.1\.2"):
            dgc.paged_mqa_logits(q, kv, w, lens, table, 512)
        return
    logits = dgc.paged_mqa_logits(q, kv, w, lens, table, 512)
    assert logits.shape == (batch * next_n, 512)
    wheel_calls = [c for c in state.calls if c.name.endswith("paged_mqa_logits")]
    assert len(wheel_calls) == 1
    call = wheel_calls[0]
    if version == "0.2.5":  # fp8_paged_mqa_logits is gone; fp8_fp4_* takes a bare q there
        assert call.name == "fp8_fp4_paged_mqa_logits"
        assert "clean_logits" not in call.args
    else:
        assert call.name == "fp8_paged_mqa_logits"
        # the wheel's cleaning rejects 2-D context lens (H200, 0.1.4.post1): never asked for
        assert call.args["clean_logits"] is False
    # the facade cleans in torch, on every release
    row_lens = lens.reshape(-1, 1)
    cols = torch.arange(512)[None, :]
    assert torch.isinf(logits[cols.expand_as(logits) >= row_lens]).all()
    assert (logits[cols.expand_as(logits) < row_lens] == 1).all()
    assert call.args["q"] is q and call.args["context_lens"] is lens
    assert call.args["schedule_meta"].shape == (state.num_sms + 1, 2)


def test_fp8_fp4_rejects_bare_q_up_to_0_1_7_and_facade_avoids_it(standin):
    state = standin("0.1.4.post1")
    q, kv, w, lens, table = paged_inputs(2, 1)
    meta = torch.zeros((state.num_sms + 1, 2), dtype=torch.int32)
    from deepgemm_compat import _load

    with pytest.raises(TypeError):  # the wheel's own torch.Tensor([1.0], dtype=...) call
        _load._module.fp8_fp4_paged_mqa_logits(q, kv, w, lens, table, meta, 64)
    dgc.paged_mqa_logits(q, kv, w, lens, table, 64)
    assert [c.name for c in state.calls if c.name.endswith("mqa_logits")] == [
        "fp8_paged_mqa_logits"
    ]


def test_q_scale_goes_to_fp8_fp4_as_a_pair(standin):
    state = standin("0.2.3.post2")
    q, kv, w, lens, table = paged_inputs(2, 1)
    q_sf = torch.ones((2, 1, 64))
    dgc.paged_mqa_logits(q.view(torch.uint8), kv, w, lens, table, 64, q_scale=q_sf)
    (call,) = state.named("fp8_fp4_paged_mqa_logits")
    assert isinstance(call.args["q"], tuple) and call.args["q"][1] is q_sf


def test_schedule_is_cached_and_rebuilt_when_sm_count_changes(standin):
    state = standin("0.1.4.post1")
    q, kv, w, lens, table = paged_inputs(4, 1)
    for _ in range(3):  # three indexer layers of one forward
        dgc.paged_mqa_logits(q, kv, w, lens, table, 256)
    assert len(state.named("get_paged_mqa_logits_metadata")) == 1
    with dgc.num_sms_scope(66):
        dgc.paged_mqa_logits(q, kv, w, lens, table, 256)
        metas = state.named("get_paged_mqa_logits_metadata")
        assert len(metas) == 2 and metas[-1].args["num_sms"] == 66
        assert state.named("fp8_paged_mqa_logits")[-1].args["schedule_meta"].shape == (67, 2)
    assert state.num_sms == 132  # restored
    dgc.paged_mqa_logits(q, kv, w, lens, table, 256)
    assert len(state.named("get_paged_mqa_logits_metadata")) == 3


def test_schedule_rebuilt_when_context_lens_change(standin):
    state = standin("0.2.2")
    q, kv, w, lens, table = paged_inputs(4, 1)
    dgc.paged_mqa_logits(q, kv, w, lens, table, 256)
    lens += 1  # in place: same tensor, new version counter
    dgc.paged_mqa_logits(q, kv, w, lens, table, 256)
    new_lens = lens.clone()
    dgc.paged_mqa_logits(q, kv, w, new_lens, table, 256)
    assert len(state.named("get_paged_mqa_logits_metadata")) == 3


def test_stale_caller_schedule_is_refused(standin):
    standin("0.2.3.post2")
    q, kv, w, lens, table = paged_inputs(4, 1)
    stale = torch.zeros((133, 2), dtype=torch.int32)
    with dgc.num_sms_scope(100), pytest.raises(dgc.InputError, match=r"needs 101 rows"):
        dgc.paged_mqa_logits(q, kv, w, lens, table, 256, schedule_meta=stale)


def test_schedule_cache_object(standin):
    standin("0.2.5")
    cache = _schedule.ScheduleCache()
    lens = torch.ones((3, 1), dtype=torch.int32)
    a = cache.get(lens, 64)
    assert cache.get(lens, 64) is a and cache.builds == 1
    assert cache.get(lens, 64, num_sms=10).shape == (11, 2) and cache.builds == 2


# ---- ragged MQA logits ------------------------------------------------------------------


@pytest.mark.parametrize("max_seqlen_k", [0, 16])
def test_mqa_logits_routes_per_release(family, max_seqlen_k):
    version, state = family
    s, s_kv, h, d = 5, 40, 64, 128
    q = torch.zeros((s, h, d), dtype=FP8)
    kv, kv_sf = torch.zeros((s_kv, d), dtype=FP8), torch.ones(s_kv)
    w = torch.ones((s, h))
    ks = torch.tensor([0, 2, 4, 6, 8], dtype=torch.int32)
    ke = ks + 10
    logits = dgc.mqa_logits(q, kv, kv_sf, w, ks, ke, max_seqlen_k=max_seqlen_k)
    (call,) = [c for c in state.calls if c.name.endswith("mqa_logits")]
    assert call.args["kv"][1] is kv_sf
    if version == "0.2.5":
        assert call.name == "fp8_fp4_mqa_logits" and "clean_logits" not in call.args
        cols = torch.arange(logits.shape[1])[None, :]
        valid = (
            (cols < ke[:, None] - ks[:, None])
            if max_seqlen_k
            else (cols >= ks[:, None]) & (cols < ke[:, None])
        )
        assert (logits[valid] == 1).all() and torch.isinf(logits[~valid]).all()
    else:
        assert call.name == "fp8_mqa_logits" and call.args["clean_logits"] is True
    assert call.args["max_seqlen_k"] == max_seqlen_k


# ---- GEMMs ------------------------------------------------------------------------------


def test_fp8_gemm_nt(family):
    _, state = family
    lhs = fp8_pair(256, 512, scale_shape=(256, 4))
    rhs = fp8_pair(384, 512, scale_shape=(3, 4))
    out = torch.empty((256, 384), dtype=torch.bfloat16)
    assert dgc.fp8_gemm_nt(lhs, rhs, out, recipe=(1, 128, 128)) is out
    (call,) = state.named("fp8_fp4_gemm_nt")  # fp8_gemm_nt is an alias in every release
    assert call.args["a"][0] is lhs[0] and call.args["d"] is out
    assert call.args["recipe"] == (1, 128, 128)


@pytest.mark.parametrize("how", ["positional", "m_indices", "grouped_layout"])
def test_grouped_contiguous_layout_spellings(family, how):
    _, state = family
    lhs = fp8_pair(256, 512, scale_shape=(256, 4))
    rhs = fp8_pair(4, 384, 512, scale_shape=(4, 3, 4))
    out = torch.empty((256, 384), dtype=torch.bfloat16)
    layout = torch.zeros(256, dtype=torch.int32)
    kwargs = {
        "positional": {},
        "m_indices": {"m_indices": layout},
        "grouped_layout": {"grouped_layout": layout},
    }[how]
    args = (layout,) if how == "positional" else ()
    dgc.grouped_gemm_contiguous(lhs, rhs, out, *args, **kwargs)
    (call,) = state.named("m_grouped_fp8_fp4_gemm_nt_contiguous")
    assert call.args["grouped_layout"] is layout


def test_grouped_contiguous_keyword_m_indices_is_what_the_wheel_rejects(standin):
    standin("0.1.4.post1")
    from deepgemm_compat import _load

    with pytest.raises(TypeError):
        _load._module.m_grouped_fp8_gemm_nt_contiguous(None, None, None, m_indices=None)


def test_grouped_contiguous_optional_added_in_0_1_4(standin):
    lhs = fp8_pair(128, 512, scale_shape=(128, 4))
    rhs = fp8_pair(2, 256, 512, scale_shape=(2, 2, 4))
    out, layout = torch.empty((128, 256), dtype=torch.bfloat16), torch.zeros(128, dtype=torch.int32)
    standin("0.1.2")
    with pytest.raises(dgc.UnsupportedFeatureError, match=r"ensure_zero_padding.*0\.1\.4"):
        dgc.grouped_gemm_contiguous(lhs, rhs, out, layout, ensure_zero_padding=False)
    state = standin("0.1.4.post1")
    dgc.grouped_gemm_contiguous(lhs, rhs, out, layout, ensure_zero_padding=False)
    assert state.calls[-1].args["ensure_zero_padding"] is False
    assert state.calls[-1].args["expected_m_for_psum_layout"] is None  # not shifted


def test_grouped_contiguous_empty_m_skips_the_wheel(standin):
    state = standin("0.2.3.post2")
    lhs = fp8_pair(0, 512, scale_shape=(0, 4))
    rhs = fp8_pair(2, 256, 512, scale_shape=(2, 2, 4))
    out = torch.empty((0, 256), dtype=torch.bfloat16)
    dgc.grouped_gemm_contiguous(lhs, rhs, out, torch.zeros(0, dtype=torch.int32))
    assert state.calls == []


def masked_args():
    lhs = fp8_pair(4, 64, 512, scale_shape=(4, 64, 4))
    rhs = fp8_pair(4, 256, 512, scale_shape=(4, 2, 4))
    out = torch.empty((4, 64, 256), dtype=torch.bfloat16)
    return lhs, rhs, out, torch.full((4,), 10, dtype=torch.int32)


def test_grouped_masked_result_is_normalised(family):
    _, state = family
    lhs, rhs, out, masked_m = masked_args()
    res = dgc.grouped_gemm_masked(lhs, rhs, out, masked_m, 16)
    assert isinstance(res, dgc.MaskedGemmResult) and res.out is out and res.overlap is None
    (call,) = state.named("m_grouped_fp8_fp4_gemm_nt_masked")
    assert call.args["expected_m"] == 16


def test_grouped_masked_overlap_is_refused_where_the_signature_lacks_it(family):
    version, _ = family
    lhs, rhs, out, masked_m = masked_args()
    with pytest.raises(NotImplementedError, match=rf"{version}.*enable_overlap"):
        dgc.grouped_gemm_masked(
            lhs,
            rhs,
            out,
            masked_m,
            16,
            enable_overlap=True,
            max_block_n=256,
            signal=torch.zeros(4, dtype=torch.int32),
        )
