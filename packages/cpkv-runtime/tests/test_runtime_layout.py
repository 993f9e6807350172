"""plan_layout against the oracle; slot numbering, dedup, owners, inverse, current tokens."""

from __future__ import annotations

import _oracle
import cpkv_runtime as cr
import pytest
import torch
from _scenarios import ADVERSARIAL, SCENARIOS, Batch
from _strategies import batches
from hypothesis import given
from hypothesis import strategies as st


def _assert_matches_oracle(batch: Batch, dedup: bool) -> cr.Layout:
    layout = batch.plan(dedup=dedup)
    want = _oracle.plan(
        batch.req_pages, batch.prefix, batch.extend, batch.page_size, batch.num_pages, dedup
    )
    assert layout.slot_table.tolist() == want.slot_table
    assert layout.slot_page.tolist() == want.slot_page
    assert layout.slot_owner.tolist() == want.slot_owner
    assert layout.inverse.tolist() == want.inverse_dense()
    for name in ("slot_table", "slot_page", "slot_owner", "inverse", "req_pages", "seq_lens"):
        assert getattr(layout, name).dtype == torch.int32, name
    cr.check_invariants(layout)
    return layout


@given(batch=batches(), dedup=st.booleans())
def test_plan_layout_matches_oracle(batch, dedup):
    _assert_matches_oracle(batch, dedup)


@pytest.mark.parametrize("name", sorted({**SCENARIOS, **ADVERSARIAL}))
@pytest.mark.parametrize("dedup", [True, False])
def test_plan_layout_scenarios_match_oracle(name, dedup):
    _assert_matches_oracle({**SCENARIOS, **ADVERSARIAL}[name], dedup)


@given(batch=batches())
def test_current_tokens_match_oracle(batch):
    layout = batch.plan()
    token_req, token_pos, loc = cr.current_tokens(layout)
    want = _oracle.current_tokens(batch.req_pages, batch.prefix, batch.extend, batch.page_size)
    assert (token_req.tolist(), token_pos.tolist(), loc.tolist()) == tuple(want)
    assert layout.num_tokens == sum(batch.extend)


def test_slot_numbering_single_request_is_page_order():
    layout = cr.plan_layout([[9, 4, 7, -1]], [70], [60], 64, 10)
    assert layout.slot_table.tolist() == [[0, 1, 2, -1]]
    assert layout.slot_page.tolist() == [9, 4, 7]
    assert layout.slot_owner.tolist() == [-1, 0, 0]  # prefix 70: page j=1 holds token 70


def test_slot_numbering_is_first_use_row_major():
    # b0 reads 5, 6; b1 reads 6, 5 then writes 8; b2 reads 5 and writes 6 (a private copy).
    layout = cr.plan_layout([[5, 6, -1], [6, 5, 8], [5, 6, -1]], [16, 16, 8], [0, 3, 2], 8, 10)
    assert layout.slot_table.tolist() == [[0, 1, -1], [1, 0, 2], [0, 3, -1]]
    assert layout.slot_page.tolist() == [5, 6, 8, 6]
    assert layout.slot_owner.tolist() == [-1, -1, 1, 2]


def test_dedup_off_gives_every_pair_its_own_slot():
    layout = cr.plan_layout([[5, 6], [6, 5]], [16, 16], [0, 0], 8, 10, dedup=False)
    assert layout.slot_table.tolist() == [[0, 1], [2, 3]]
    assert layout.slot_owner.tolist() == [-1, -1, -1, -1]


def test_dedup_saving_eight_requests_on_one_prefix():
    page_size, prefix_pages, bsz = 64, 1024, 8  # a 64K-token prefix
    shared = list(range(prefix_pages))
    rows = [[*shared, prefix_pages + b] for b in range(bsz)]
    args = (rows, [prefix_pages * page_size] * bsz, [64] * bsz, page_size, prefix_pages + bsz)
    with_dedup, without = cr.plan_layout(*args), cr.plan_layout(*args, dedup=False)
    assert with_dedup.num_slots == prefix_pages + bsz
    assert without.num_slots == bsz * (prefix_pages + 1)
    assert with_dedup.materialize_bytes(1152) == (prefix_pages + bsz) * 64 * 1152
    assert without.materialize_bytes(1152) / with_dedup.materialize_bytes(1152) > 7.9


def test_entries_past_used_pages_are_ignored_and_cleared():
    layout = cr.plan_layout([[3, 3, 99, -5]], [5], [0], 8, 4)  # only j=0 is used
    assert layout.req_pages.tolist() == [[3, -1, -1, -1]]
    assert layout.inverse.tolist() == [[-1, -1, -1, 0]]


def test_empty_batch_and_empty_requests():
    layout = cr.plan_layout(torch.empty(0, 3, dtype=torch.int32), [], [], 64, 4)
    assert layout.num_slots == 0 and layout.inverse.shape == (0, 4) and layout.num_tokens == 0
    layout = cr.plan_layout([[-1, -1], [-1, -1]], [0, 0], [0, 0], 64, 4)
    assert layout.num_slots == 0 and (layout.inverse == -1).all()


def test_int64_inputs_and_layout_repr():
    rows = torch.tensor([[2, 1]], dtype=torch.int64)
    layout = cr.plan_layout(rows, torch.tensor([64]), torch.tensor([1]), 64, 3)
    assert layout.inverse.tolist() == [[-1, 1, 0]]  # page 2 -> slot 0, page 1 -> slot 1
    assert "num_slots=2" in repr(layout) and layout.batch_size == 1 and layout.max_pages == 2
    with pytest.raises(AttributeError):
        layout.num_pages = 5  # frozen


@given(batch=batches())
def test_build_inverse_backends_agree(batch, backend):
    if backend == "torch":
        pytest.skip("torch is the reference the others are compared with")
    layout = batch.plan()
    again = batch.plan(backend=backend)
    assert torch.equal(again.inverse, layout.inverse)
