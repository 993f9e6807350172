"""materialize / fill_current / remap_locs / remap_positions / current_page_mask vs the oracle."""

from __future__ import annotations

import _oracle
import cpkv_runtime as cr
import pytest
import torch
from _scenarios import SCENARIOS, Batch, oracle_dense, pool_for, run
from _strategies import batches
from hypothesis import given
from hypothesis import strategies as st


def _equal_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    )


@given(batch=batches(), dedup=st.booleans())
def test_pipeline_matches_oracle(batch, dedup):
    r = run(batch, dedup=dedup)
    _, want = oracle_dense(batch, r.kv_pool, r.current_kv, dedup)
    assert torch.equal(r.dense, want)
    cr.check_invariants(r.layout, r.kv_pool, r.dense, r.current_kv, r.token_req, r.out_cache_loc)


@st.composite
def _locs(draw, batch: Batch, layout: cr.Layout, two_d: bool):
    """Random rows of pool locations (any page, some -1) with their requests."""
    span = batch.num_pages * batch.page_size
    n = draw(st.integers(0, 12))
    loc = st.one_of(st.just(-1), st.integers(0, span - 1))
    if two_d:
        k = draw(st.integers(0, 5))
        locs = [[draw(loc) for _ in range(k)] for _ in range(n)]
    else:
        locs = [draw(loc) for _ in range(n)]
    req = [draw(st.integers(0, layout.batch_size - 1)) for _ in range(n)]
    return locs, req


@given(data=st.data(), batch=batches(), two_d=st.booleans(), wide=st.booleans())
def test_remap_locs_matches_oracle(data, batch, two_d, wide):
    layout = batch.plan()
    locs, req = data.draw(_locs(batch, layout, two_d))
    lay = _oracle.plan(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages
    )
    dtype = torch.int64 if wide else torch.int32
    shape = (len(locs), len(locs[0]) if locs else 0) if two_d else (len(locs),)
    got = cr.remap_locs(
        torch.tensor(locs, dtype=dtype).reshape(shape), torch.tensor(req, dtype=torch.long), layout
    )
    assert got.dtype == torch.int32 and got.shape == shape
    assert got.tolist() == _oracle.remap_locs(locs, req, lay)


@given(data=st.data(), batch=batches(), two_d=st.booleans())
def test_remap_positions_matches_oracle(data, batch, two_d):
    layout = batch.plan()
    n = data.draw(st.integers(0, 10))
    k = data.draw(st.integers(0, 4))
    top = max(batch.num_pages * batch.page_size + 2, 1)
    pos = st.one_of(st.just(-1), st.integers(0, top))
    positions = [[data.draw(pos) for _ in range(k)] if two_d else data.draw(pos) for _ in range(n)]
    req = [data.draw(st.integers(0, layout.batch_size - 1)) for _ in range(n)]
    lay = _oracle.plan(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages
    )
    shape = (n, k) if two_d else (n,)
    got = cr.remap_positions(
        torch.tensor(positions, dtype=torch.int64).reshape(shape),
        torch.tensor(req, dtype=torch.long),
        layout,
    )
    assert got.tolist() == _oracle.remap_positions(positions, req, lay)


@given(batch=batches())
def test_current_page_mask_matches_oracle(batch):
    layout = batch.plan()
    want = _oracle.current_page_mask(batch.req_pages, batch.prefix, batch.extend, batch.page_size)
    assert cr.current_page_mask(layout).tolist() == want


def test_current_page_mask_empty_extend_on_partial_page():
    # prefix 100 ends mid-page but nothing is current: no page is written.
    layout = cr.plan_layout([[1, 2], [3, 4]], [100, 100], [0, 1], 64, 8)
    assert cr.current_page_mask(layout).tolist() == [[False, False], [False, True]]
    assert layout.slot_owner.tolist() == [-1, -1, -1, 1]


ROWS = [
    pytest.param(torch.bfloat16, (576,), id="bf16x576-1152B"),
    pytest.param(torch.uint8, (656,), id="fp8+scales-656B"),
    pytest.param(torch.uint8, (132,), id="indexer-132B"),
    pytest.param(torch.float8_e4m3fn, (656,), id="float8-656B"),
    pytest.param(torch.float32, (3,), id="f32x3-12B"),
    pytest.param(torch.uint8, (33,), id="odd-33B"),
    pytest.param(torch.int16, (2, 5), id="int16-2x5"),
    pytest.param(torch.bool, (7,), id="bool-7B"),
    pytest.param(torch.float64, (), id="scalar-rows"),
]


def _random_rows(shape, dtype) -> torch.Tensor:
    raw = torch.randint(
        0,
        256,
        (*shape[:-1], shape[-1] * torch.empty((), dtype=dtype).element_size()) if shape else (),
        dtype=torch.uint8,
    )
    return raw.view(dtype) if shape else raw


def _bytes_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Random bytes reinterpreted as dtype (NaN payloads and -0.0 included: rows are opaque)."""
    esize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape, esize), dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).squeeze(-1) if esize == 1 else raw.view(dtype).reshape(shape)


@pytest.mark.parametrize(("dtype", "row"), ROWS)
@pytest.mark.parametrize("name", ["shared_prefix_pages", "prefix_not_page_aligned"])
def test_opaque_rows_of_any_width(dtype, row, name, backend):
    batch = SCENARIOS[name]
    layout = batch.plan(backend=backend)
    kv_pool = _bytes_tensor((batch.num_pages, batch.page_size, *row), dtype)
    current_kv = _bytes_tensor((layout.num_tokens, *row), dtype)
    token_req, _, loc = cr.current_tokens(layout)
    dense = cr.materialize(kv_pool, layout, backend=backend)
    cr.fill_current(dense, current_kv, token_req, loc, layout, backend=backend)
    _, want = oracle_dense(batch, kv_pool, current_kv)
    assert dense.dtype == dtype and _equal_bytes(dense, want)
    cr.check_invariants(layout, kv_pool, dense, current_kv, token_req, loc)


def test_materialize_into_out_and_strided_pool(backend):
    batch = SCENARIOS["cache_miss_mixed"]
    layout = batch.plan()
    wide = _bytes_tensor((batch.num_pages, batch.page_size, 10), torch.bfloat16)
    kv_pool = wide[..., :6]  # rows not contiguous with each other: dtype-level fallback
    out = torch.empty((layout.num_slots, batch.page_size, 6), dtype=torch.bfloat16)
    dense = cr.materialize(kv_pool, layout, out=out, backend=backend)
    assert dense is out
    _, want = oracle_dense(batch, kv_pool, None)
    assert _equal_bytes(dense, want)


def test_fill_current_skips_padding_rows(backend):
    batch = SCENARIOS["extend_not_divisible"]
    layout = batch.plan()
    kv_pool = pool_for(batch)
    token_req, _, loc = cr.current_tokens(layout)
    current_kv = torch.randint(-100, 100, (layout.num_tokens, 4), dtype=torch.int32)
    pad_req = torch.cat([token_req, torch.tensor([-1, 0], dtype=torch.int32)])
    pad_loc = torch.cat([loc, torch.tensor([-1, -1], dtype=torch.int32)])
    pad_kv = torch.cat([current_kv, torch.full((2, 4), 12345, dtype=torch.int32)])
    dense = cr.materialize(kv_pool, layout)
    cr.fill_current(dense, pad_kv, pad_req, pad_loc.long(), layout, backend=backend)
    _, want = oracle_dense(batch, kv_pool, current_kv)
    assert torch.equal(dense, want)


@given(batch=batches())
def test_backends_agree_on_every_op(batch, backend):
    if backend == "torch":
        pytest.skip("torch is the reference the others are compared with")
    ref = run(batch, backend="torch")
    got = run(batch, backend=backend)
    assert torch.equal(got.dense, ref.dense)
    assert torch.equal(got.layout.inverse, ref.layout.inverse)
    locs = (
        torch.arange(-1, batch.num_pages * batch.page_size)
        .view(1, -1)
        .expand(ref.layout.batch_size, -1)
    )
    req = torch.arange(ref.layout.batch_size)
    assert torch.equal(
        cr.remap_locs(locs, req, ref.layout, backend=backend),
        cr.remap_locs(locs, req, ref.layout, backend="torch"),
    )
    assert torch.equal(
        cr.current_page_mask(ref.layout, backend=backend), cr.current_page_mask(ref.layout)
    )


def test_remap_locs_out_argument():
    layout = SCENARIOS["tiny_extends"].plan()
    locs = torch.tensor([[8, 9, -1], [16, 24, 40]])
    out = torch.empty(2, 3, dtype=torch.int32)
    got = cr.remap_locs(locs, torch.tensor([0, 1]), layout, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert got.tolist() == cr.remap_locs(locs, torch.tensor([0, 1]), layout).tolist()


@pytest.mark.parametrize("layout_kind", ["page_gaps", "row_gaps"])
def test_fill_current_into_strided_dense(layout_kind, backend):
    batch = SCENARIOS["shared_prefix_pages"]
    r = run(batch)
    slots, page = r.layout.num_slots, batch.page_size
    if layout_kind == "page_gaps":  # pages spaced 2P rows apart
        dense = torch.zeros(slots, 2 * page, 4, dtype=torch.int32)[:, :page]
    else:  # rows padded to 6 words
        dense = torch.zeros(slots, page, 6, dtype=torch.int32)[..., :4]
    cr.materialize(r.kv_pool, r.layout, out=dense, backend=backend)
    cr.fill_current(dense, r.current_kv, r.token_req, r.out_cache_loc, r.layout, backend=backend)
    assert torch.equal(dense, r.dense)


def test_padding_rows_may_name_any_request(backend):
    layout = cr.plan_layout([[1]], [3], [2], 8, 4)
    dense = cr.materialize(torch.zeros(4, 8, 2), layout, backend=backend)
    token_req, loc = torch.tensor([0, 0, 99, -5]), torch.tensor([11, 12, -1, -1])
    cr.fill_current(dense, torch.ones(4, 2), token_req, loc, layout, backend=backend)
    assert dense[0, :, 0].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    got = cr.remap_locs(torch.tensor([[-1, -1], [11, -1]]), torch.tensor([-1, 0]), layout)
    assert got.tolist() == [[-1, -1], [3, -1]]


def test_ops_on_an_empty_batch(backend):
    layout = cr.plan_layout(torch.empty(0, 2, dtype=torch.int32), [], [], 8, 4, backend=backend)
    dense = cr.materialize(torch.zeros(4, 8, 2), layout, backend=backend)
    assert dense.shape == (0, 8, 2)
    cr.fill_current(
        dense, torch.zeros(2, 2), torch.tensor([-1, -1]), torch.tensor([-1, -1]), layout
    )
    assert cr.remap_locs(torch.tensor([[-1]]), torch.tensor([-1]), layout).tolist() == [[-1]]
    assert cr.remap_positions(torch.tensor([-1]), torch.tensor([-1]), layout).tolist() == [-1]
    assert cr.current_page_mask(layout, backend=backend).shape == (0, 2)
