"""SGLang 0.5.23's RAGGED top-k offsets under interleave CP, and the ``ragged-offsets`` hook.

Configuration: interleave prefill CP, ``flashmla_sparse`` prefill over the packed fp8 KV pool
(RAGGED top-k transform), an EXTEND batch in which no request has a prefix. Every batch goes
rank by rank through SGLang's own ``prepare_cp_forward`` -> ``init_forward_metadata`` ->
``DSAIndexerMetadata.topk_transform`` -> ``forward_extend`` (``_sglang_dsa.py``); the stand-ins
for what needs CUDA or NCCL, each listed in ``_dsa_stand_ins.REPLACEMENTS``, are:

- the GPU capability query and SGLang's platform facts: emulated SM100 (``cpkv-serve --gpu``);
- ``cp_split._dsa_cp_interleave_q_seqs_kernel`` (Triton): the same kernel, Triton's CPU interpreter;
- ``dsv4.topk.plan_topk_v2`` (JIT CUDA): an empty plan (read only by the PAGED v2 transform);
- ``dsv4.topk.topk_transform_ragged_v2`` (JIT CUDA): SGLang's ``_topk_unfused`` + offsets;
- ``_quantize_k_cache_fast_kernel`` / ``_dequantize_k_cache_paged_kernel`` (Triton): torch;
- ``flash_mla_interface.flash_mla_sparse_fwd`` (FlashMLA): torch sparse MLA that records its rows;
- ``attn_cp_group`` (NCCL): an in-process all-gather of every rank's shard;
- ``dsa_backend._compiled_cat`` (``torch.compile``): the same function, eager.

Each KV row carries the ``(request, position)`` of its token, so a query's reads name their
source. Expected reads come from the causal rule (a query of request b at position p reads b's
positions 0..p: GLM-5.1's top-k of 2048 covers every sequence here), expected offsets from the
plain-Python rule in ``sglang_cpkv.plugin.hooks.ragged_offsets``, outputs from the same request
alone with CP off. Nothing is compared with this code's own earlier output.
"""

from __future__ import annotations

import _ragged_prefill
import _sglang_dsa as dsa
import _sglang_env as env
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.hooks.ragged_offsets import (
    attended_offsets,
    rank_rows,
    sglang_offsets,
)

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]
#: The shared fixtures (``_ragged_prefill``), bound here so pytest finds them by name.
mla, deploy = _ragged_prefill.mla, _ragged_prefill.deploy

Req = dsa.Req

#: name -> (cp, extend lengths, what upstream does), none with a prefix.
CASES = {
    "one_token_first": (2, [1, 6], "rank 1 holds no token of request 0 and reads its row"),
    "two_short_first": (4, [1, 1, 300], "every rank reads a foreign row"),
    "one_token_each": (4, [1, 1, 1, 1], "ranks 1-3 each read request 0's row"),
    "short_last": (2, [6, 1], "clean: every rank keeps request 0"),
    "uneven_pair": (2, [5, 7], "clean: both ranks keep both requests"),
}


def _reqs(extend: list[int]) -> list[Req]:
    return [Req(uid, n) for uid, n in enumerate(extend)]


def _foreign(reqs, run) -> list[str]:
    """One line per query row that read a row outside its own causal history."""
    lines = []
    for (b, p), got in zip(run.rows, run.reads, strict=True):
        want = dsa.expected_reads(reqs[b], p)
        if got != want:
            extra = sorted(set(got) - set(want))
            lines.append(f"request {b} position {p} read {extra} (wanted {want[0]}..{want[-1]})")
    return lines


def _alone(deploy, mla, reqs) -> dict[tuple[int, int], torch.Tensor]:
    """Each request alone with CP off: output per (uid, position)."""
    out = {}
    for r in reqs:
        (run,) = deploy(1).run([Req(r.uid, r.extend)], dsa.upstream_init_forward_metadata(), mla)
        out.update({(r.uid, p): o for (_, p), o in zip(run.rows, run.out, strict=True)})
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_upstream_reads_rows_where_its_offsets_point(name, deploy, mla):
    cp, extend, what = CASES[name]
    reqs = _reqs(extend)
    runs = deploy(cp).run(reqs, dsa.upstream_init_forward_metadata(), mla)
    zeros = [0] * len(reqs)
    chunk = [(uid, p) for uid, n in enumerate(extend) for p in range(n)]
    foreign_ranks = []
    for rank, run in enumerate(runs):
        assert (run.method, run.impl, run.packed_fp8) == ("RAGGED", "flashmla_sparse", True)
        assert run.rows == rank_rows(extend, cp, rank)
        assert run.offsets == sglang_offsets(extend, zeros, cp, rank)  # the rule, restated
        for (_, p), base, got in zip(run.rows, run.offsets, run.reads, strict=True):
            assert got == sorted(chunk[base : base + p + 1])  # rows [base, base + p] of the chunk
        misplaced = run.offsets != attended_offsets(extend, zeros, cp, rank)
        assert bool(_foreign(reqs, run)) == misplaced
        if misplaced:
            foreign_ranks.append(rank)
    expected_foreign = {
        "one_token_first": [1], "two_short_first": [0, 1, 2, 3], "one_token_each": [1, 2, 3],
        "short_last": [], "uneven_pair": [],
    }[name]  # fmt: skip
    assert foreign_ranks == expected_foreign, what


def test_one_token_first_reads_request_0(deploy, mla):
    """[1, 6] at cp 2: rank 1's queries (request 1 at positions 0, 2, 4) all read request 0."""
    (_, rank1) = deploy(2).run(_reqs([1, 6]), dsa.upstream_init_forward_metadata(), mla)
    assert rank1.kept == [1] and rank1.offsets == [0, 0, 0]
    request_1 = [(1, i) for i in range(4)]
    assert rank1.reads == [[(0, 0)], [(0, 0), *request_1[:2]], [(0, 0), *request_1]]


@pytest.mark.parametrize("name", list(CASES))
def test_hook_reads_own_rows_and_matches_batch_size_1(name, deploy, mla):
    cp, extend, _ = CASES[name]
    reqs = _reqs(extend)
    runs = deploy(cp).run(reqs, dsa.hooked_init_forward_metadata(), mla)
    alone = _alone(deploy, mla, reqs)
    for rank, run in enumerate(runs):
        assert run.offsets == attended_offsets(extend, [0] * len(reqs), cp, rank)
        assert _foreign(reqs, run) == []
        for (b, p), out in zip(run.rows, run.out, strict=True):
            assert torch.equal(out, alone[(reqs[b].uid, p)]), f"rank {rank} request {b} pos {p}"


def test_without_the_hook_outputs_differ_from_batch_size_1(deploy, mla):
    """The same comparison as above fails upstream: the bug is visible in the outputs."""
    reqs = _reqs([1, 6])
    runs = deploy(2).run(reqs, dsa.upstream_init_forward_metadata(), mla)
    alone = _alone(deploy, mla, reqs)
    differ = [(b, p) for run in runs for (b, p), o in zip(run.rows, run.out, strict=True)
              if not torch.equal(o, alone[(b, p)])]  # fmt: skip
    assert differ == [(1, 0), (1, 2), (1, 4)]


@pytest.mark.parametrize("hooked", [False, True])
def test_seed_export_names_own_slots(hooked, deploy, mla):
    """``prepare_mtp_seed_indices`` turns fused RAGGED indices into pool slots; upstream builds
    its table over the kept requests (right for the old offsets), the hook gives the chunk's."""
    reqs = _reqs([1, 1, 1, 1])
    fn = dsa.hooked_init_forward_metadata() if hooked else dsa.upstream_init_forward_metadata()
    locs = dsa.pool_locs(reqs)
    for run in deploy(4).run(reqs, fn, mla):
        assert run.seeds == [sorted(locs[b][: p + 1]) for b, p in run.rows]


@pytest.mark.parametrize("hooked", [False, True])
def test_unfused_topk_path(hooked, plugin, mla, monkeypatch):
    """``SGLANG_DSA_FUSE_TOPK=0`` with the torch top-k backend: ``forward_extend`` adds the
    offsets itself (``torch.where(mask, topk + offset, topk)``); same bug, same fix."""
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "0")
    args = dsa.server_args(4, env.SM100, *dsa.FLASHMLA_SPARSE_FP8, "--dsa-topk-backend", "torch")
    reqs = _reqs([1, 1, 1, 1])  # even split: one row per rank
    fn = dsa.hooked_init_forward_metadata() if hooked else dsa.upstream_init_forward_metadata()
    runs = dsa.DsaPrefill(args, env.SM100).run(reqs, fn, mla)
    assert [bool(_foreign(reqs, run)) for run in runs] == [False, *([not hooked] * 3)]


# Random batches: SGLang's offsets against the rule on both sides (metadata only, no attention).
extend_lists = st.lists(st.integers(1, 9), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extend=extend_lists, cp=st.sampled_from([2, 4]))
def test_offsets_rule_matches_sglang_on_random_batches(extend, cp, deploy, mla):
    if sum(extend) < cp:  # SGLang runs such a batch without CP
        return
    reqs, zeros = _reqs(extend), [0] * len(extend)
    up = deploy(cp).run(reqs, dsa.upstream_init_forward_metadata(), mla, forward=False)
    fixed = deploy(cp).run(reqs, dsa.hooked_init_forward_metadata(), mla, forward=False)
    for rank in range(cp):
        assert up[rank].rows == fixed[rank].rows == rank_rows(extend, cp, rank)
        assert up[rank].offsets == sglang_offsets(extend, zeros, cp, rank)
        assert fixed[rank].offsets == attended_offsets(extend, zeros, cp, rank)
