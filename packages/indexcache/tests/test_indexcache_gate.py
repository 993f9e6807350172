"""The gate, the carry, and the two-batch-overlap check."""

from __future__ import annotations

import pytest
import torch
from _indexcache_helpers import EXAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st
from indexcache import (
    CarryError,
    IncompatibleOptionError,
    IndexerSchedule,
    TopkCarry,
    check_two_batch_overlap,
    should_run_indexer,
)

S = IndexerSchedule.from_freq(10, 4, 2, num_nextn_layers=1)  # FFSSSFSSSF + NextN at 10


def _topk(layer: int, rows: int = 3) -> torch.Tensor:
    return torch.full((rows, 2), layer, dtype=torch.int32)


# Gate --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("carried", [False, True])
def test_full_layer_always_runs(carried):
    assert should_run_indexer(S, 5, carried=carried)


def test_shared_layer_reuses_and_never_computes():
    assert not should_run_indexer(S, 6, carried=True)
    with pytest.raises(
        CarryError, match=r"layer 6 is shared \(it reuses layer 5's top-k\) but nothing"
    ):
        should_run_indexer(S, 6, carried=False)


def test_nextn_reuses_when_carried_and_computes_otherwise():
    assert not should_run_indexer(S, 10, carried=True)
    assert should_run_indexer(S, 10, carried=False)


# Carry -------------------------------------------------------------------------------------------
def test_carry_threads_the_nearest_full_layer():
    carry, computed, used = TopkCarry(S), [], {}

    def compute_for(layer):
        def run():
            computed.append(layer)
            return _topk(layer)

        return run

    for layer in range(10):
        used[layer] = int(carry.step(layer, compute_for(layer), num_rows=3)[0, 0])
    assert computed == list(S.full_layers)
    assert used == {layer: S.source_layer(layer) for layer in range(10)}
    # nothing after the last target layer reads its top-k: NextN starts empty and computes
    assert carry.topk is None and carry.source_layer is None
    assert int(carry.step(10, compute_for(10))[0, 0]) == 10 and computed[-1] == 10


def test_nextn_reuses_a_seeded_topk():
    """The next MTP step (or a runtime that hands NextN the target's top-k) seeds the carry."""
    carry = TopkCarry(S)
    carry.seed(_topk(10), source_layer=10)  # NextN's own top-k from the previous MTP step
    assert int(carry.step(10, lambda: pytest.fail("carried: must reuse"))[0, 0]) == 10
    assert carry.topk is None  # the pass ends with NextN: the caller seeds the next step


@given(freq=st.integers(1, 6), offset=st.integers(1, 6), layers=st.integers(1, 40))
@settings(max_examples=EXAMPLES, deadline=None)
def test_carry_computes_exactly_the_full_layers(freq, offset, layers):
    s = IndexerSchedule.from_freq(layers, freq, offset)
    carry, computed = TopkCarry(s), []
    for layer in range(layers):
        out = carry.step(layer, lambda layer=layer: computed.append(layer) or _topk(layer))
        assert int(out[0, 0]) == s.source_layer(layer)
        # held only while the next layer will reuse it
        assert (carry.topk is not None) == s.next_layer_reuses(layer)
    assert computed == list(s.full_layers)


def test_carry_drops_topk_no_one_reuses():
    s = IndexerSchedule.from_freq(4, 1, 2)  # all full: nothing is ever held
    carry = TopkCarry(s)
    for layer in range(4):
        carry.step(layer, lambda layer=layer: _topk(layer))
        assert carry.topk is None


def test_nextn_computes_when_the_target_carried_nothing():
    s = IndexerSchedule.from_freq(2, 1, 2, num_nextn_layers=1)
    carry = TopkCarry(s)
    carry.reset()  # e.g. a draft step after a target pass that did not carry
    assert int(carry.step(2, lambda: _topk(42))[0, 0]) == 42


def test_shared_layer_with_empty_carry_raises():
    carry = TopkCarry(S)
    with pytest.raises(CarryError, match="nothing is carried"):
        carry.step(3, lambda: pytest.fail("a shared layer must never compute"))


def test_pipeline_stage_seed():
    carry = TopkCarry(S)
    carry.seed(_topk(5), source_layer=5)  # the previous stage ended at layer 5
    assert int(carry.step(6, lambda: pytest.fail("shared"))[0, 0]) == 5


def test_carry_from_the_wrong_layer_raises():
    carry = TopkCarry(S)
    carry.seed(_topk(1), source_layer=1)
    with pytest.raises(
        CarryError, match=r"layer 6 must reuse layer 5's top-k but the carry holds layer 1's"
    ):
        carry.step(6, lambda: pytest.fail("shared"))


def test_carry_row_mismatch_raises():
    carry = TopkCarry(S)
    carry.seed(_topk(5, rows=512), source_layer=5)
    with pytest.raises(CarryError, match=r"64 token rows but the carried top-k has 512 rows"):
        carry.step(6, lambda: pytest.fail("shared"), num_rows=64)


# Two-batch overlap -------------------------------------------------------------------------------
def test_two_batch_overlap_rejected_only_when_a_layer_shares():
    check_two_batch_overlap(IndexerSchedule.from_freq(78, 1, 2), True)
    check_two_batch_overlap(IndexerSchedule.from_freq(78, 4, 2), False)
    # offset past the last layer: freq 4 but every layer is full, so overlap is fine
    check_two_batch_overlap(IndexerSchedule.from_freq(4, 4, 9), True)
    with pytest.raises(IncompatibleOptionError, match=r"shares 57 of 78 layers.*disable two-batch"):
        check_two_batch_overlap(IndexerSchedule.from_freq(78, 4, 2), True)
