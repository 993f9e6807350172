"""Layouts the kernels must handle: strided pools, unaligned views, word widths; bad input."""

from __future__ import annotations

import pytest
import torch
from _cases import make_data, named_batches, random_rows
from _compare import assert_bitwise_equal
from cpkv_kernels import KernelInputError
from cpkv_kernels._bytes import vec_words, word_width


@pytest.mark.parametrize(
    ("row_bytes", "stride", "addr", "width", "vec"),
    [
        (656 * 64, 656 * 64, 0, 4, 4),  # fp8 MLA page: 16-byte groups
        (1152, 1152, 0, 4, 4),
        (132, 132, 0, 4, 1),  # indexer row: 4-byte words, rows not 16-byte aligned
        (132 * 16, 132 * 16, 0, 4, 4),  # 16 indexer rows make an aligned page
        (6, 6, 0, 2, 1),
        (7, 7, 0, 1, 1),
        (656, 656, 1, 1, 1),  # an odd address forces bytes
    ],
)
def test_word_choice(row_bytes, stride, addr, width, vec):
    assert word_width(row_bytes, stride, addr) == width
    assert vec_words(width, row_bytes, stride, addr) == vec


def test_strided_pool_and_unaligned_views(device, triton_ops, torch_ops):
    """A pool that is every other page of a bigger buffer, and buffers at odd byte offsets."""
    d = make_data(named_batches(16)[0], "132B", device)
    lay = d.layout
    big = random_rows((2 * lay.num_pages, 16, 132), torch.uint8, device)
    pool = big[::2]  # page stride 2 * page bytes
    assert not pool.is_contiguous()
    assert_bitwise_equal(
        "strided pool",
        triton_ops["materialize"](pool, lay.slot_page),
        torch_ops["materialize"](pool, lay.slot_page),
        2,
        "(slot, row)",
    )
    flat = random_rows((1 + lay.num_pages * 16 * 132,), torch.uint8, device)
    odd_pool = flat[1:].view(lay.num_pages, 16, 132)  # address 1 mod 16
    out_flat = torch.zeros(1 + lay.num_slots * 16 * 132, dtype=torch.uint8, device=device)
    odd_out = out_flat[1:].view(lay.num_slots, 16, 132)
    triton_ops["materialize"](odd_pool, lay.slot_page, odd_out)
    want = torch_ops["materialize"](odd_pool, lay.slot_page)
    assert_bitwise_equal("unaligned materialize", odd_out, want, 2, "(slot, row)")
    cur = random_rows((1 + d.current_kv.numel(),), torch.uint8, device)[1:].view_as(d.current_kv)
    triton_ops["fill_current"](odd_out, cur, d.token_req, d.out_cache_loc, lay.inverse, 16)
    torch_ops["fill_current"](want, cur, d.token_req, d.out_cache_loc, lay.inverse, 16)
    assert_bitwise_equal("unaligned fill_current", odd_out, want, 2, "(slot, row)")
    assert out_flat[0] == 0  # nothing written before the view


def test_slot_page_minus_one_leaves_slot_untouched(device, triton_ops):
    """Padding slots (-1) are skipped: fixed-size dense buffers for CUDA graphs stay valid."""
    pool = random_rows((4, 16, 132), torch.uint8, device)
    out = torch.zeros((3, 16, 132), dtype=torch.uint8, device=device)
    slot_page = torch.tensor([2, -1, 0], dtype=torch.int32, device=device)
    triton_ops["materialize"](pool, slot_page, out)
    assert torch.equal(out[0], pool[2]) and torch.equal(out[2], pool[0])
    assert int(out[1].count_nonzero()) == 0


def test_non_contiguous_rows_rejected(device, triton_ops):
    pool = random_rows((4, 16, 264), torch.uint8, device)[:, :, :132]
    with pytest.raises(KernelInputError, match=r"kv_pool must be contiguous after its first dim"):
        triton_ops["materialize"](pool, torch.tensor([0], dtype=torch.int32, device=device))


@pytest.mark.parametrize(
    ("op", "make_args", "match"),
    [
        ("build_inverse", lambda z: (z(2, 3), z(3, 2), 8), r"req_pages must match slot_table"),
        ("build_inverse", lambda z: (z(2, 3).float(), z(2, 3), 8), r"slot_table must be"),
        ("materialize", lambda z: (z(4, 16, 8), z(3), z(2, 16, 8)), r"out must be \(3, 16, 8\)"),
        ("materialize", lambda z: (z(4, 16, 8), z(3, 1)), r"slot_page must be \(S,\)"),
        (
            "fill_current",
            lambda z: (z(2, 16, 8), z(5, 9), z(5), z(5), z(1, 4), 16),
            r"current_kv must be \(T, 8\)",
        ),
        (
            "fill_current",
            lambda z: (z(2, 16, 8), z(5, 8), z(4), z(5), z(1, 4), 16),
            r"token_req must have 5 entries",
        ),
        (
            "fill_current",
            lambda z: (z(2, 16, 8), z(5, 8), z(5), z(5), z(1, 4), 64),
            r"dense must be \(S, page_size=64",
        ),
        ("remap_locs", lambda z: (z(3, 4), z(2), z(1, 4), 16), r"req_id must have 3 entries"),
        ("remap_locs", lambda z: (z(3, 4), z(3), z(1, 4).long(), 16), r"inverse must be int32"),
        ("remap_locs", lambda z: (z(3, 4), z(3), z(1, 4), 0), r"page_size must be positive"),
        ("current_page_mask", lambda z: (z(2, 4), z(3), z(2), 16), r"prefix_lens must have 2"),
    ],
)
def test_bad_input_raises_before_launch(op, make_args, match, device, triton_ops):
    def z(*shape):
        return torch.zeros(shape, dtype=torch.int32, device=device)

    with pytest.raises(KernelInputError, match=match):
        triton_ops[op](*make_args(z))


def test_kernel_input_error_is_a_value_error():
    import cpkv_runtime

    assert issubclass(KernelInputError, ValueError)
    assert issubclass(KernelInputError, cpkv_runtime.LayoutError)


def test_duplicate_page_in_request_raises_through_the_runtime(device):
    """The runtime validates values before dispatching to the kernels."""
    import cpkv_runtime

    with pytest.raises(ValueError, match=r"req_pages\[0\] lists page 3 twice"):
        cpkv_runtime.plan_layout(
            torch.tensor([[3, 3]], device=device), [0], [2], 1, 8, backend="triton"
        )
