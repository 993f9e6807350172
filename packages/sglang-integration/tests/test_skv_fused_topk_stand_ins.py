"""The backend suite's fused top-k stand-ins, held to SGLang's torch top-k and unfused transforms.

With ``SGLANG_DSA_FUSE_TOPK=1`` SGLang's DSA indexer calls CUDA kernels that select each row's
top-k and transform it in one launch (``_skv_backend_stand_ins.FusedTopK`` computes them in
torch). Their contract is SGLang's unfused path: ``_topk_unfused`` (torch top-k over each row's
``[row_start, row_start + length)`` window, ``-1`` past ``min(k, length)``) followed, for PAGED,
by ``transform_index_page_table_prefill`` (a Triton kernel, run here by Triton's interpreter)
and, for RAGGED, by ``forward_extend``'s ``topk + topk_indices_offset``. They are compared on
the shapes an extend batch gives them: several requests, prefixes, per-row causal lengths below
and above ``k``, windows into one batch-wide score matrix. Order is not part of the contract
(the CUDA kernels leave it to their threads), so rows are compared as sets; where scores tie at
the k-th place both sides must pick a valid top-k, and the stand-in picks the lowest positions.
"""

from __future__ import annotations

import _sglang_env
import pytest
import torch
from _skv_backend_stand_ins import FusedTopK, topk_positions

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS

#: An extend batch of three requests: prefix and extend lengths.
PREFIX, EXTEND = (67, 4, 36), (3, 1, 4)


def _torch_topk(score, lengths, k, row_starts=None) -> torch.Tensor:
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import _topk_unfused

    return _topk_unfused(score, lengths, k, row_starts=row_starts)


def _batch(seed: int) -> dict:
    """What the indexer hands the top-k for the batch: one score row per query token over the
    batch's keys, each row's window start (its request's first key) and causal length, the
    requests' page table (page size 1) and query offsets."""
    g = torch.Generator().manual_seed(seed)
    seq = [p + e for p, e in zip(PREFIX, EXTEND, strict=True)]
    key_start = torch.tensor([0, *seq[:-1]]).cumsum(0)
    rows = [(b, p) for b, (q, e) in enumerate(zip(PREFIX, EXTEND, strict=True))
            for p in range(q, q + e)]  # fmt: skip
    score = torch.randn(len(rows), sum(seq), generator=g)
    table = torch.randperm(4096, generator=g)[: 3 * max(seq)].view(3, max(seq)).to(torch.int32)
    return {
        "score": score,
        "lengths": torch.tensor([p + 1 for _, p in rows], dtype=torch.int32),
        "row_starts": torch.tensor([int(key_start[b]) for b, _ in rows], dtype=torch.int32),
        "table": table,
        "cu_seqlens_q": torch.tensor([0, *EXTEND], dtype=torch.int32).cumsum(0).to(torch.int32),
        "offsets": torch.tensor([int(key_start[b]) for b, _ in rows], dtype=torch.int32),
    }


def _as_sets(t: torch.Tensor) -> list[set[int]]:
    return [set(row[row >= 0].tolist()) for row in t]


def _sglang_paged(batch: dict, k: int) -> torch.Tensor:
    """SGLang's unfused PAGED path: torch top-k, then its Triton page-table transform."""
    import sglang.kernels.ops.attention.dsa.transform_index as transform
    from triton.runtime.interpreter import InterpretedFunction

    local = _torch_topk(batch["score"], batch["lengths"], k, batch["row_starts"])
    kernel = transform.transform_index_page_table_prefill_kernel
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transform, "transform_index_page_table_prefill_kernel",
                   InterpretedFunction(getattr(kernel, "fn", kernel)))  # fmt: skip
        return transform.transform_index_page_table_prefill(
            page_table=batch["table"], topk_indices=local, extend_lens_cpu=list(EXTEND),
            page_size=1, cu_seqlens_q=batch["cu_seqlens_q"],
        )  # fmt: skip


@pytest.mark.parametrize("k", [1, 4, 32, 80])
def test_selection_is_torch_topks_on_distinct_scores(k):
    """The same set per row; ``-1`` exactly past ``min(k, length)``; a window that fits ``k``
    listed in order (the kernels' naive path)."""
    batch = _batch(0)
    ours = topk_positions(batch["score"], batch["lengths"], k, batch["row_starts"])
    want = _torch_topk(batch["score"], batch["lengths"], k, batch["row_starts"])
    assert ours.shape == want.shape == (len(batch["lengths"]), k) and ours.dtype == torch.int32
    assert _as_sets(ours) == _as_sets(want)
    for row, n in zip(ours, batch["lengths"].tolist(), strict=True):
        kept = min(k, n)
        assert (row[kept:] == -1).all() and (row[:kept] >= 0).all()
        if n <= k:
            assert row[:n].tolist() == list(range(n))


def test_ties_at_the_kth_score_pick_a_valid_topk_the_lowest_positions():
    score = torch.tensor([[5.0, 3.0, 3.0, 3.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                          [1.0, 3.0, 3.0, 0.0, 3.0, 9.0]])  # fmt: skip
    lengths = torch.tensor([6, 6, 6], dtype=torch.int32)
    ours = topk_positions(score, lengths, 3)
    want = _torch_topk(score, lengths, 3)
    for row, s, w in zip(ours, score, want, strict=True):  # the same multiset of scores
        assert sorted(s[row.long()].tolist()) == sorted(s[w.long()].tolist())
    assert _as_sets(ours) == [{0, 1, 2}, {0, 1, 2}, {5, 1, 2}]


def test_padding_empty_rows_and_k_beyond_the_scores():
    score = torch.randn(3, 5, generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([0, 2, 5], dtype=torch.int32)
    ours = topk_positions(score, lengths, 8, torch.tensor([0, 3, 0]))
    want = _torch_topk(score, lengths, 8, torch.tensor([0, 3, 0]))
    assert ours.tolist()[0] == [-1] * 8
    assert ours.tolist()[1] == [0, 1] + [-1] * 6
    assert _as_sets(ours) == _as_sets(want) and ((ours == -1) == (want == -1)).all()
    assert topk_positions(score[:0], lengths[:0], 8).shape == (0, 8)


@pytest.mark.parametrize("k", [4, 32, 80])
def test_paged_kernel_is_torch_topk_then_sglangs_page_table_transform(k):
    """``fast_topk_transform_fused``: each row's positions through its own request's row of the
    page table (``cu_seqlens_q``), as SGLang's Triton transform maps torch's top-k."""
    batch = _batch(1)
    ours = FusedTopK().fast_topk_transform_fused(
        batch["score"], batch["lengths"], batch["table"], batch["cu_seqlens_q"], k,
        row_starts=batch["row_starts"],
    )  # fmt: skip
    want = _sglang_paged(batch, k)
    assert ours.shape == want.shape and ours.dtype == torch.int32
    assert _as_sets(ours) == _as_sets(want)
    assert ((ours == -1) == (want == -1)).all()


@pytest.mark.parametrize("kernel", ["topk_transform_ragged_v2", "fast_topk_transform_ragged_fused"])
@pytest.mark.parametrize("k", [4, 32, 80])
def test_ragged_kernels_are_torch_topk_plus_the_offsets(kernel, k):
    """The RAGGED kernels add each row's ``topk_indices_offset`` to the positions it selected,
    as ``forward_extend``'s unfused RAGGED branch does to torch's top-k; ``-1`` stays."""
    batch = _batch(2)
    offsets = batch["offsets"] + 1000  # any base: the kernels add it, they do not read it
    local = _torch_topk(batch["score"], batch["lengths"], k, batch["row_starts"])
    want = torch.where(local != -1, local + offsets[:, None], local)
    fused = FusedTopK()
    score, lengths, starts = batch["score"], batch["lengths"], batch["row_starts"]
    if kernel == "topk_transform_ragged_v2":
        ours = torch.empty_like(want)
        fused.topk_transform_ragged_v2(
            score, lengths, out_offsets=offsets, out_indices=ours, row_starts=starts
        )
    else:
        ours = fused.fast_topk_transform_ragged_fused(score, lengths, offsets, k, starts)
    assert _as_sets(ours) == _as_sets(want) and ((ours == -1) == (want == -1)).all()
    assert fused.calls == {kernel: 1}


def test_plan_has_the_shape_sglangs_paged_v2_path_asserts():
    plan = FusedTopK().plan_topk_v2(torch.tensor([3, 70, 5], dtype=torch.int32))
    assert plan.shape == (4, 2) and plan.dtype == torch.int32
    assert plan[1:].eq(0).all(), "no row routed to the cluster path"
