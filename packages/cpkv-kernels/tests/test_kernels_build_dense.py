"""fill_sources, build_dense and layer_step: Triton (and CUDA where present) == torch, bitwise.

The torch definitions are held to ``materialize`` + ``fill_current`` in cpkv-runtime's tests; here
the kernels are held to the torch definitions on the named adversarial batches and random ones,
on exact and padded (capacity) layouts, with every ``used_slots`` bound from none to past the
capacity, and on inputs that ``fill_current`` skips (padding rows, requests outside the batch,
pages outside the pool, slots past the buffer) or that name one dense row twice (the largest row
index wins). One test per op, so the first failing op does not hide the others.
"""

from __future__ import annotations

import random

import cpkv_runtime as cr
import pytest
import torch
from _cases import ROWS, Data, make_data, named_batches, random_batch, random_rows
from _compare import assert_bitwise_equal

SENTINEL = 0x5A  # bytes of dense rows nobody may write


def _data(case: str, page_size: int, row: str, device: str) -> Data:
    if case.startswith("random"):
        rng = random.Random(f"{case}-{page_size}-{row}")
        share = {"random_disjoint": 0.0, "random_shared": 0.6, "random_same": 1.0}[case]
        batch = random_batch(rng, rng.choice([1, 3, 7]), page_size, share, 4 * page_size + 5)
    else:
        batch = next(b for b in named_batches(page_size) if b.name == case)
    return make_data(batch, row, device, topk=16)


CASES = [b.name for b in named_batches(1)] + ["random_disjoint", "random_shared", "random_same"]


def _padded(d: Data, capacity: int) -> cr.Layout:
    """``d``'s batch planned into ``capacity`` slots (torch): padding slots past the used ones."""
    lay = d.layout
    return cr.plan_layout_static(
        lay.req_pages, lay.prefix_lens, lay.extend_lens, lay.page_size, lay.num_pages,
        max_slots=capacity, backend="torch",
    )  # fmt: skip


def _dense(layout: cr.Layout, d: Data) -> torch.Tensor:
    dense = torch.empty(
        (layout.num_slots, *d.kv_pool.shape[1:]), dtype=d.kv_pool.dtype, device=d.kv_pool.device
    )
    dense.view(torch.uint8).fill_(SENTINEL)
    return dense


def _odd_rows(d: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """``d``'s current rows plus rows fill_current skips and a destination named twice."""
    lay, device = d.layout, d.token_req.device
    span = lay.num_pages * lay.page_size
    extra_req = [lay.batch_size, -3, 0, 0]  # outside the batch twice; a page out of the pool
    extra_loc = [0, 0, span + lay.page_size, 0]
    written = torch.nonzero(d.out_cache_loc >= 0)
    if written.numel():  # a later row naming an earlier row's destination: the later one wins
        t = int(written[0, 0])
        extra_req[-1], extra_loc[-1] = int(d.token_req[t]), int(d.out_cache_loc[t])
    token_req = torch.cat([d.token_req, torch.tensor(extra_req, device=device).int()])
    loc = torch.cat([d.out_cache_loc, torch.tensor(extra_loc, device=device).int()])
    return token_req, loc


@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("case", CASES)
def test_fill_sources(case, page_size, loc_dtype, device, impls, torch_ops):
    d = _data(case, page_size, "132B", device)
    lay = d.layout
    token_req, loc = _odd_rows(d)
    for slots in sorted({lay.num_slots, max(lay.num_slots - 1, 0), lay.num_slots + 5}):
        args = (token_req, loc.to(loc_dtype), lay.inverse, page_size, slots)
        want = torch_ops["fill_sources"](*args)
        for name, ops in impls.items():
            got = ops["fill_sources"](*args)
            label = f"{name} fill_sources {case} P={page_size} S={slots}"
            assert_bitwise_equal(label, got, want, 2, "(slot, row)")


def test_fill_sources_largest_row_wins(device, impls, torch_ops):
    """Two rows naming one dense row: the later row's index stays, as a sequential scatter."""
    inverse = torch.tensor([[-1, 0, 1]], dtype=torch.int32, device=device)
    token_req = torch.zeros(5, dtype=torch.int32, device=device)
    loc = torch.tensor([4, 5, 4, -1, 9], dtype=torch.int32, device=device)  # P = 4: page 1, 1, 1
    want = torch.full((2, 4), -1, dtype=torch.int32, device=device)
    want[0, 0], want[0, 1], want[1, 1] = 2, 1, 4
    for ops in (torch_ops, *impls.values()):
        assert torch.equal(ops["fill_sources"](token_req, loc, inverse, 4, 2), want)


def _used_bounds(layout: cr.Layout) -> list[torch.Tensor | None]:
    """No bound, the layout's own count, and counts below, at and past the capacity."""
    device = layout.slot_page.device
    counts = {0, layout.num_slots // 2, layout.num_slots, layout.num_slots + 3}
    own = [layout.used_slots] if layout.used_slots is not None else []
    return [None, *own, *(torch.tensor([c], dtype=torch.int32, device=device) for c in counts)]


@pytest.mark.parametrize("row", list(ROWS))
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("case", CASES)
def test_build_dense(case, page_size, row, device, impls, torch_ops):
    d = _data(case, page_size, row, device)
    capacity = d.layout.num_slots + 3
    for layout in (d.layout, _padded(d, capacity)):
        token_req, loc = _odd_rows(d)
        cur = random_rows((token_req.shape[0], *d.kv_pool.shape[2:]), d.kv_pool.dtype, device)
        slots = layout.num_slots
        sources = torch_ops["fill_sources"](token_req, loc, layout.inverse, page_size, slots)
        for used in _used_bounds(layout):
            want = _dense(layout, d)
            torch_ops["build_dense"](d.kv_pool, layout.slot_page, cur, sources, used, want)
            for name, ops in impls.items():
                got = _dense(layout, d)
                ops["build_dense"](d.kv_pool, layout.slot_page, cur, sources, used, got)
                bound = "-" if used is None else int(used)
                label = f"{name} build_dense {case} P={page_size} {row} S={slots} u={bound}"
                assert_bitwise_equal(label, got, want, 2, "(slot, row)")


def test_build_dense_on_strided_pools(device, impls, torch_ops):
    """Pool and dense pages spaced apart (slices of wider buffers) at odd byte offsets."""
    d = _data("shared_prefix_pages", 16, "132B", device)
    lay = d.layout
    n, s = lay.num_pages, lay.num_slots
    pool = random_rows((n * 16 * 133 + 1,), torch.uint8, device)
    pool = pool.as_strided((n, 16, 132), (16 * 133, 132, 1), 1)  # 1-byte words only
    backing = torch.full((s * 16 * 140 + 7,), SENTINEL, dtype=torch.uint8, device=device)
    loc = d.out_cache_loc
    sources = torch_ops["fill_sources"](d.token_req, loc, lay.inverse, 16, s)
    want = backing.clone().as_strided((s, 16, 132), (16 * 140, 132, 1), 5)
    torch_ops["build_dense"](pool, lay.slot_page, d.current_kv, sources, None, want)
    for name, ops in impls.items():
        got = backing.clone().as_strided((s, 16, 132), (16 * 140, 132, 1), 5)
        ops["build_dense"](pool, lay.slot_page, d.current_kv, sources, None, got)
        assert_bitwise_equal(f"{name} strided build_dense", got, want, 2, "(slot, row)")


@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("case", ["shared_prefix_pages", "minus_one_padding", "random_shared"])
def test_layer_step(case, page_size, device, impls, torch_ops):
    d = _data(case, page_size, "656B", device)
    layout = _padded(d, d.layout.num_slots + 2)
    sources = torch_ops["fill_sources"](
        d.token_req, d.out_cache_loc, layout.inverse, page_size, layout.num_slots
    )
    dense_args = (d.kv_pool, layout.slot_page, d.current_kv, sources, layout.used_slots)
    want = _dense(layout, d)
    torch_ops["build_dense"](*dense_args, want)
    want_locs = torch_ops["remap_locs"](d.locs, d.req_id, layout.inverse, page_size)
    for name, ops in impls.items():
        got, got_locs = _dense(layout, d), torch.full_like(d.locs, 7)
        ops["layer_step"](*dense_args, got, d.locs, d.req_id, layout.inverse, page_size, got_locs)
        assert_bitwise_equal(f"{name} layer_step dense", got, want, 2, "(slot, row)")
        assert_bitwise_equal(f"{name} layer_step remap", got_locs, want_locs, 2, "(n, k)")


def test_checks_name_the_input(device, impls):
    d = _data("shared_prefix_pages", 16, "132B", device)
    lay = d.layout
    sources = torch.full((lay.num_slots, 16), -1, dtype=torch.int32, device=device)
    dense = _dense(lay, d)
    for ops in impls.values():
        with pytest.raises(ValueError, match=r"sources must be int32 \(\d+, 16\)"):
            ops["build_dense"](d.kv_pool, lay.slot_page, d.current_kv, sources[:-1], None, dense)
        with pytest.raises(ValueError, match="used_slots must be one int32 count"):
            ops["build_dense"](d.kv_pool, lay.slot_page, d.current_kv, sources, sources, dense)
        with pytest.raises(ValueError, match="page_size = 8 but dense pages hold 16 rows"):
            out = torch.empty_like(d.locs)
            args = (d.kv_pool, lay.slot_page, d.current_kv, sources, None, dense)
            ops["layer_step"](*args, d.locs, d.req_id, lay.inverse, 8, out)
        with pytest.raises(ValueError, match="out_cache_loc must have"):
            ops["fill_sources"](d.token_req, d.out_cache_loc[:-1], lay.inverse, 16, 4)
