"""Bad input raises a LayoutError (a ValueError) that names the tensor, the values and the fix."""

from __future__ import annotations

import re

import cpkv_runtime as cr
import pytest
import torch
from _scenarios import DUPLICATE_PAGE_IN_REQUEST, SCENARIOS


def _raises(match: str):
    return pytest.raises(cr.LayoutError, match=re.escape(match))


def test_duplicate_page_in_request():
    b = DUPLICATE_PAGE_IN_REQUEST
    with _raises(
        "req_pages[2] lists page 917 twice (j=2 and j=3); a request may use a page once "
        "(got pages [.., 2, 917, 917])"
    ):
        b.plan()


def test_duplicate_page_far_apart():
    with _raises("req_pages[0] lists page 5 twice (j=0 and j=3)"):
        cr.plan_layout([[5, 1, 2, 5]], [30], [1], 8, 8)


def test_duplicates_past_the_used_pages_are_fine():
    cr.plan_layout([[5, 1, 5, 5]], [9], [1], 8, 8)  # uses j < 2 only


def test_layout_error_is_a_value_error():
    with pytest.raises(ValueError):
        DUPLICATE_PAGE_IN_REQUEST.plan()


@pytest.mark.parametrize(
    ("rows", "msg"),
    [
        ([[1, 8]], "req_pages[0][1] = 8 is out of range for a pool of 8 pages"),
        ([[1, -1]], "req_pages[0][1] = -1 is -1 (absent), but request 0 uses pages j < 2"),
        ([[1, -3]], "req_pages[0][1] = -3 is out of range"),
    ],
)
def test_pages_out_of_range(rows, msg):
    with _raises(msg):
        cr.plan_layout(rows, [8], [2], 8, 8)


def test_lengths_that_disagree():
    with _raises("extend_lens has 1 entries but req_pages has 2 rows"):
        cr.plan_layout([[1], [2]], [1, 1], [1], 8, 8)
    with _raises("prefix_lens has 3 entries but req_pages has 2 rows"):
        cr.plan_layout([[1], [2]], [1, 1, 1], [1, 1], 8, 8)
    with _raises("needs ceil(17/8) = 3 pages, but req_pages has only 2 columns"):
        cr.plan_layout([[1, 2]], [16], [1], 8, 8)
    with _raises("extend_lens[0] = -1 is negative"):
        cr.plan_layout([[1, 2]], [3], [-1], 8, 8)


def test_non_integer_indices():
    with _raises("req_pages must hold integer indices (int32 or int64), got torch.float32"):
        cr.plan_layout(torch.tensor([[1.0, 2.0]]), [8], [1], 8, 8)
    with _raises("prefix_lens must hold integer indices"):
        cr.plan_layout([[1, 2]], [8.5], [1], 8, 8)
    with _raises("page_size must be an int, got 8.0"):
        cr.plan_layout([[1, 2]], [8], [1], 8.0, 8)
    with _raises("num_pages must be >= 1, got 0"):
        cr.plan_layout([[1, 2]], [8], [1], 8, 0)
    with _raises("req_pages must be 2-D, got shape (2,)"):
        cr.plan_layout(torch.tensor([1, 2]), [8], [1], 8, 8)


def test_mixed_devices():
    rows = torch.tensor([[1, 2]], device="meta")
    with _raises("prefix_lens is on cpu but req_pages is on meta"):
        cr.plan_layout(rows, torch.tensor([8]), torch.tensor([1], device="meta"), 8, 8)
    layout = SCENARIOS["tiny_extends"].plan()
    with _raises("kv_pool is on meta but layout is on cpu"):
        cr.materialize(torch.empty(8, 8, 4, device="meta"), layout)


def test_materialize_shapes():
    layout = SCENARIOS["tiny_extends"].plan()  # 8 pages of 8
    with _raises("kv_pool must be (num_pages, P, *row) = (8, 8, ...) as planned, got (8, 4, 4)"):
        cr.materialize(torch.zeros(8, 4, 4), layout)
    with _raises("out must be (num_slots, P, *row)"):
        cr.materialize(torch.zeros(8, 8, 4), layout, out=torch.zeros(1, 8, 4))
    with _raises("out rows are (5,) torch.float32 but kv_pool rows are (4,) torch.float32"):
        cr.materialize(torch.zeros(8, 8, 4), layout, out=torch.zeros(layout.num_slots, 8, 5))


def _fill_inputs(name="tiny_extends"):
    layout = SCENARIOS[name].plan()
    dense = cr.materialize(torch.zeros(layout.num_pages, layout.page_size, 4), layout)
    token_req, _, loc = cr.current_tokens(layout)
    return layout, dense, torch.ones(layout.num_tokens, 4), token_req, loc


def test_fill_current_rejects_foreign_and_read_only_pages():
    layout, dense, cur, token_req, loc = _fill_inputs()
    bad = loc.clone()
    bad[0] = 5 * 8  # page 5 belongs to request 2 only
    with _raises("out_cache_loc[0] = 40 is on page 5, which request 0 does not use"):
        cr.fill_current(dense, cur, token_req, bad, layout)
    bad[0] = 1 * 8 + 3  # page 1 is request 0's shared history
    with _raises("out_cache_loc[0] = 11 is on page 1, which request 0 only reads (history)"):
        cr.fill_current(dense, cur, token_req, bad, layout)


def test_fill_current_rejects_bad_values_and_shapes():
    layout, dense, cur, token_req, loc = _fill_inputs()
    with _raises("out_cache_loc[1] = 64 is outside the pool [0, 64)"):
        cr.fill_current(dense, cur, token_req, torch.tensor([loc[0], 64, *loc[2:]]), layout)
    with _raises("token_req[0] = 7 is not a request of this batch (B = 4)"):
        cr.fill_current(dense, cur, torch.tensor([7, *token_req[1:]]), loc, layout)
    with _raises("two current tokens of request 1 write pool location 32"):
        cr.fill_current(
            dense, cur, token_req, torch.tensor([loc[0], loc[1], loc[1], *loc[3:]]), layout
        )
    with _raises("must have one row per token"):
        cr.fill_current(dense, cur[:2], token_req, loc, layout)
    with _raises("current_kv rows are (4,) torch.float64 but dense rows are (4,) torch.float32"):
        cr.fill_current(dense, cur.double(), token_req, loc, layout)
    with _raises("dense must be (num_slots, P, *row)"):
        cr.fill_current(dense[:1], cur, token_req, loc, layout)
    with _raises("out_cache_loc must hold integer indices"):
        cr.fill_current(dense, cur, token_req, loc.float(), layout)


def test_fill_current_into_a_batch_without_slots():
    """No request uses a page: a token that writes one is named, not an IndexError."""
    layout = cr.plan_layout([[-1]], [0], [0], 8, 4)
    dense = cr.materialize(torch.zeros(4, 8, 2), layout)
    with _raises("out_cache_loc[0] = 3 is on page 0, which request 0 does not use"):
        cr.fill_current(dense, torch.ones(1, 2), torch.tensor([0]), torch.tensor([3]), layout)


def test_remap_rejects_bad_values():
    layout = SCENARIOS["tiny_extends"].plan()
    with _raises("locs[0, 1] = -2 is negative and not -1 (absent)"):
        cr.remap_locs(torch.tensor([[3, -2]]), torch.tensor([0]), layout)
    with _raises("locs[0, 0] = 64 is outside the pool [0, 64)"):
        cr.remap_locs(torch.tensor([[64]]), torch.tensor([0]), layout)
    with _raises("req_id[0] = 4 is not a request of this batch (B = 4)"):
        cr.remap_locs(torch.tensor([[3]]), torch.tensor([4]), layout)
    with _raises("req_id has 2 entries but locs has 1 rows"):
        cr.remap_locs(torch.tensor([[3]]), torch.tensor([0, 1]), layout)
    with _raises("locs must be 1-D or 2-D"):
        cr.remap_locs(torch.zeros(1, 1, 1, dtype=torch.long), torch.tensor([0]), layout)
    with _raises("req_id[0] = -1 is not a request"):
        cr.remap_positions(torch.tensor([3]), torch.tensor([-1]), layout)
    # a row of only -1 may carry request -1 (CP padding)
    assert cr.remap_locs(torch.tensor([[-1, -1]]), torch.tensor([-1]), layout).tolist() == [
        [-1, -1]
    ]


def test_unknown_backend_name():
    layout = SCENARIOS["tiny_extends"].plan()
    with _raises(
        "backend='fast' is not a backend; choose one of ('auto', 'cuda', 'triton', 'torch')"
    ):
        cr.current_page_mask(layout, backend="fast")
