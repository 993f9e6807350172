"""Other batch>1 suspects from reading SGLang 0.5.23's interleave-CP DSA prefill, each run.

Same harness, stand-ins and markers as ``test_upstream_ragged_offsets.py`` (listed there and in
``_dsa_stand_ins.REPLACEMENTS``); RAGGED configuration (flashmla_sparse, packed fp8 KV, SM100).

- **Prefix anywhere in the batch** (the branch the hook leaves alone): attention dequantises
  ``page_table_1_flattened``, the kept requests' page-table rows back to back, and the offsets
  are the kept requests' cumulative sequence lengths: one indexing, so every rank reads its own
  rows.
- **Radix hitters batched with the chunked continuation whose pages they hit**: every table is
  keyed by request (``req_to_token`` rows, per-request ``page_table_1`` rows); shared pages are
  read through each request's own row, nothing is keyed by page value.
- **Extends shorter than cp (full radix hits)**: ``bs_idx`` differs per rank; with a prefix in
  the batch every per-row table is sharded by the same ``shard_local_tokens`` and indexed by
  kept request. Without one it is the bug (``one_token_each`` in the other module).
- **Prefix length from a padded length (the class of sglang PR 23415)**: interleave metadata
  takes ``sum(extend_seq_lens_cpu)``, not ``len(input_ids)``; prefix lengths come from
  ``seq_lens_cpu`` and ``extend_seq_lens_cpu``, both unpadded. Per-rank physical padding pads
  query rows only, and they carry ``-1`` top-k and a top-k length of 0. One real crash of this
  class remains: with ``SGLANG_DSA_FUSE_TOPK=0``, ``forward_extend`` adds the logical-length
  offsets to physical-length top-k rows.
"""

from __future__ import annotations

import _dsa_stand_ins as stand_ins
import _sglang_dsa as dsa
import _sglang_env as env
import pytest
from sglang_cpkv.plugin.hooks.ragged_offsets import attended_offsets, rank_rows, sglang_offsets

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

Req = dsa.Req
BOTH = pytest.mark.parametrize("hooked", [False, True], ids=["upstream", "hooked"])


@pytest.fixture(scope="module")
def mla(plugin):
    with pytest.MonkeyPatch.context() as mp, stand_ins.cuda_stand_ins(mp) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def cp4(plugin) -> dsa.DsaPrefill:
    return dsa.DsaPrefill(dsa.server_args(4, env.SM100, *dsa.FLASHMLA_SPARSE_FP8), env.SM100)


def _fn(hooked: bool):
    return dsa.hooked_init_forward_metadata() if hooked else dsa.upstream_init_forward_metadata()


def _check_own_reads(reqs, runs) -> None:
    for rank, run in enumerate(runs):
        for (b, p), got in zip(run.rows, run.reads, strict=True):
            assert got == dsa.expected_reads(reqs[b], p), f"rank {rank}: request {b} pos {p}"


def _check_seeds(reqs, runs) -> None:
    locs = dsa.pool_locs(reqs)
    for run in runs:
        assert run.seeds == [sorted(locs[b][: p + 1]) for b, p in run.rows]


@BOTH
def test_prefix_anywhere_uses_the_kept_page_table(hooked, cp4, mla):
    """[1, 1, 300] at cp 4 with prefixes on the short requests: the branch reads pool pages."""
    reqs = [Req(0, 1, prefix=64), Req(1, 1, prefix=70), Req(2, 300)]
    runs = cp4.run(reqs, _fn(hooked), mla)
    extend, prefix = [1, 1, 300], [64, 70, 0]
    for rank, run in enumerate(runs):
        assert run.method == "RAGGED"
        assert run.offsets == sglang_offsets(extend, prefix, 4, rank)
        assert run.offsets == attended_offsets(extend, prefix, 4, rank)
    assert [run.kept for run in runs] == [[0, 2], [1, 2], [2], [2]]
    _check_own_reads(reqs, runs)
    _check_seeds(reqs, runs)


@BOTH
@pytest.mark.parametrize(
    "order", [("owner", "hitter", "fresh"), ("hitter", "fresh", "owner")], ids=["owner_first",
                                                                                 "hitter_first"]
)  # fmt: skip
def test_radix_hitter_with_its_chunked_owner(hooked, order, cp4, mla):
    """A continues its prefill after a 128-token first chunk; B hits A's two committed pages
    (a page-aligned radix match) in the same batch; C is fresh. Shared pages, every order."""
    by = {
        "owner": Req(0, 100, prefix=128),
        "hitter": Req(1, 5, prefix=128, prefix_of=0),
        "fresh": Req(2, 3),
    }
    reqs = [by[k] for k in order]
    locs = dsa.pool_locs(reqs)
    owner, hitter = reqs.index(by["owner"]), reqs.index(by["hitter"])
    assert locs[hitter][:128] == locs[owner][:128]  # the pages really are shared
    runs = cp4.run(reqs, _fn(hooked), mla)
    _check_own_reads(reqs, runs)
    _check_seeds(reqs, runs)


@BOTH
def test_extends_shorter_than_cp_with_full_hits(hooked, cp4, mla):
    """Two full radix hits (one new token each) and a 2-token request at cp 4: four tokens,
    one per rank, so every rank keeps a different request (bs_idx [0], [1], [2], [2])."""
    reqs = [Req(0, 1, prefix=128), Req(1, 1, prefix=64, prefix_of=0), Req(2, 2)]
    runs = cp4.run(reqs, _fn(hooked), mla)
    assert [run.kept for run in runs] == [[0], [1], [2], [2]]
    assert [run.offsets for run in runs] == [[0], [0], [0], [0]]
    _check_own_reads(reqs, runs)
    _check_seeds(reqs, runs)


@BOTH
def test_fewer_tokens_than_cp_run_without_cp(hooked, cp4, mla):
    """Two full hits at cp 4: SGLang does not split a batch of fewer tokens than ranks; every
    rank runs it whole, with offsets over all requests."""
    reqs = [Req(0, 1, prefix=128), Req(1, 1, prefix=64)]
    runs = cp4.run(reqs, _fn(hooked), mla)
    for run in runs:
        assert run.rows == [(0, 128), (1, 64)] and run.offsets == [0, 129]
    _check_own_reads(reqs, runs)


@BOTH
def test_padded_input_ids_leave_lengths_alone(hooked, cp4, mla):
    """``input_ids`` padded past the batch's tokens (MLP-sync padding under DP attention):
    the interleave metadata, row split and offsets still come from the unpadded lengths, and a
    70-token prefix (not page aligned) is still 70. 7 tokens at cp 4 give ranks 2, 2, 2 and 1
    logical rows padded to 2 physical rows."""
    reqs = [Req(0, 3, prefix=70), Req(1, 4)]
    runs = cp4.run(reqs, _fn(hooked), mla, input_pad=5)
    extend, prefix = [3, 4], [70, 0]
    for rank, run in enumerate(runs):
        assert run.rows == [(b, prefix[b] + i) for b, i in rank_rows(extend, 4, rank)]
        assert run.offsets == sglang_offsets(extend, prefix, 4, rank)
    _check_own_reads(reqs, runs)


def test_unfused_topk_crashes_on_a_padded_rank(plugin, mla, monkeypatch):
    """``SGLANG_DSA_FUSE_TOPK=0``: a rank whose rows are padded (logical 3, physical 4 for
    [1, 6] at cp 2) gets ``[4, topk]`` top-k rows from the indexer but 3 offsets, and
    ``forward_extend``'s ``topk_indices + topk_indices_offset`` cannot broadcast. Eager
    attention receives the padded rows: ``RadixAttention`` trims only to
    ``global_num_token_non_padded_cpu``, the global token count. The hook does not touch it
    (it would change the fused path's dispatch); the default ``SGLANG_DSA_FUSE_TOPK=1`` adds the
    offsets inside the top-k transform over the logical rows only."""
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "0")
    args = dsa.server_args(2, env.SM100, *dsa.FLASHMLA_SPARSE_FP8, "--dsa-topk-backend", "torch")
    deployment = dsa.DsaPrefill(args, env.SM100)
    reqs = [Req(0, 1), Req(1, 6)]
    (rank0,) = deployment.run(reqs, dsa.upstream_init_forward_metadata(), mla, ranks=[0])
    assert len(rank0.reads) == 4  # rank 0 holds 4 of 7 tokens: no padding, no crash
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match .* \(3\)"):
        deployment.run(reqs, dsa.upstream_init_forward_metadata(), mla, ranks=[1])
