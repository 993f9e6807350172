"""Triton (and CUDA where present) against the torch definition, bitwise, on many batches.

``build_dense`` is held here to ``materialize`` + ``fill_current`` of the torch backend directly
(test_kernels_build_dense.py holds each new op to its own torch definition, odd inputs included).

On a CPU-only machine the Triton kernels run interpreted (TRITON_INTERPRET=1) on CPU tensors; on
a GPU machine the same tests run compiled Triton and the CUDA kernels on CUDA tensors.
"""

from __future__ import annotations

import random

import pytest
import torch
from _cases import ROWS, Data, make_data, named_batches, random_batch
from _compare import assert_bitwise_equal

PAGE_SIZES = (1, 16, 64)


def _check_all(ops, torch_ops, d: Data, label: str) -> None:
    lay = d.layout
    p = lay.page_size
    inv = ops["build_inverse"](lay.slot_table, lay.req_pages, lay.num_pages)
    want_inv = torch_ops["build_inverse"](lay.slot_table, lay.req_pages, lay.num_pages)
    assert_bitwise_equal(f"{label} build_inverse", inv, want_inv, 2, "(b, page)")

    dense = ops["materialize"](d.kv_pool, lay.slot_page)
    want = torch_ops["materialize"](d.kv_pool, lay.slot_page)
    assert_bitwise_equal(f"{label} materialize", dense, want, 2, "(slot, row)")

    ops["fill_current"](dense, d.current_kv, d.token_req, d.out_cache_loc, lay.inverse, p)
    torch_ops["fill_current"](want, d.current_kv, d.token_req, d.out_cache_loc, lay.inverse, p)
    assert_bitwise_equal(f"{label} fill_current", dense, want, 2, "(slot, row)")

    # The one-pass build equals materialize + fill_current (every slot of an exact layout used).
    args = (d.token_req, d.out_cache_loc, lay.inverse, p, lay.num_slots)
    sources = ops["fill_sources"](*args)
    assert_bitwise_equal(
        f"{label} fill_sources", sources, torch_ops["fill_sources"](*args), 2, "(s, r)"
    )
    one_pass = torch.empty_like(want)
    ops["build_dense"](d.kv_pool, lay.slot_page, d.current_kv, sources, None, one_pass)
    assert_bitwise_equal(f"{label} build_dense", one_pass, want, 2, "(slot, row)")

    for dtype in (torch.int32, torch.int64):
        locs = d.locs.to(dtype)
        got = ops["remap_locs"](locs, d.req_id, lay.inverse, p)
        assert_bitwise_equal(
            f"{label} remap_locs[N,K] {dtype}",
            got,
            torch_ops["remap_locs"](locs, d.req_id, lay.inverse, p),
            2,
            "(n, k)",
        )
        flat = locs[:, 0].contiguous()
        out = torch.full(flat.shape, 7, dtype=torch.int32, device=flat.device)
        got = ops["remap_locs"](flat, d.req_id, lay.inverse, p, out)
        assert got is out
        assert_bitwise_equal(
            f"{label} remap_locs[N] {dtype}",
            got,
            torch_ops["remap_locs"](flat, d.req_id, lay.inverse, p),
            1,
            "(n,)",
        )

    for dtype in (torch.int32, torch.int64):  # only req_pages' shape is read: any index dtype
        args = (lay.req_pages.to(dtype), lay.prefix_lens, lay.extend_lens, p)
        assert_bitwise_equal(
            f"{label} current_page_mask {dtype}",
            ops["current_page_mask"](*args),
            torch_ops["current_page_mask"](*args),
            2,
            "(b, j)",
        )


@pytest.mark.parametrize("row", ["656B", "1152B", "132B"])
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize(
    "case",
    [b.name for b in named_batches(1)],
)
def test_named_batches(case, page_size, row, device, impls, torch_ops):
    batch = next(b for b in named_batches(page_size) if b.name == case)
    data = make_data(batch, row, device)
    for name, ops in impls.items():
        _check_all(ops, torch_ops, data, f"{name} {case} P={page_size} {row}")


@pytest.mark.parametrize("row", list(ROWS))
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_random_batches(page_size, share, row, device, impls, torch_ops):
    rng = random.Random(f"{page_size}-{share}-{row}")
    batch = random_batch(rng, rng.choice([1, 3, 4, 7]), page_size, share, max_seq=3 * page_size + 5)
    data = make_data(batch, row, device)
    for name, ops in impls.items():
        _check_all(ops, torch_ops, data, f"{name} P={page_size} share={share} {row}")
