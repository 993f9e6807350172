"""``cpkv-validate --sglang-offsets``: its model of the RAGGED offsets held equal to SGLang 0.5.23.

cpkv-validate never imports SGLang, so it restates the rule (``cpkv_validate.ragged_offsets``,
``ragged_chunk_branch``). Here each batch goes rank by rank through SGLang's own
``prepare_cp_forward`` and ``init_forward_metadata`` (``_sglang_dsa.DsaPrefill``, metadata only),
once as released and once with the ``ragged-offsets`` hook, under interleave prefill CP with
``flashmla_sparse`` over the packed fp8 pool (RAGGED top-k). Per rank:

- the rows the reference engine gives the rank (``cpkv_runtime.cp_split``, interleave) are
  SGLang's rows, request and position;
- ``ragged_offsets(.., "upstream")`` is SGLang's ``topk_indices_offset``, and ``"fixed"`` the
  hook's; both also equal the hook's plain rule functions (``sglang_offsets``,
  ``attended_offsets``);
- ``ragged_chunk_branch`` is True exactly where SGLang splits the batch (a batch of fewer tokens
  than cp runs without CP, and its offsets are then the chunk starts: nothing misplaced).

The stand-ins for what needs CUDA or NCCL are ``_dsa_stand_ins.REPLACEMENTS`` (listed in
``test_upstream_ragged_offsets.py``); only the GPU capability query, the Triton CP-split kernel
(run by Triton's CPU interpreter) and the platform facts take part in the metadata build.
Expected values come from SGLang and the hook, never from cpkv-validate's own output.
"""

from __future__ import annotations

import _ragged_prefill
import _sglang_dsa as dsa
import _sglang_env as env
import pytest
import torch
from cpkv_runtime import cp_split
from cpkv_validate import RAGGED_RULES, ragged_chunk_branch, ragged_offsets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.hooks.ragged_offsets import attended_offsets, sglang_offsets

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]
#: The shared fixtures (``_ragged_prefill``), bound here so pytest finds them by name.
mla, deploy = _ragged_prefill.mla, _ragged_prefill.deploy

#: The shapes ``cpkv-validate`` runs (fresh_prompts_cp2, fresh_prompts_cp4), clean ones, and
#: batches of fewer tokens than cp (SGLang runs those without CP).
FIXED = [
    (2, [1, 6]),
    (4, [1, 1, 300]),
    (4, [1, 1, 1, 1]),
    (2, [6, 1]),
    (2, [5, 7]),
    (4, [3, 1, 2, 1, 5]),
    (4, [1, 1]),
    (2, [1]),
]


def _engine_rows(extend: list[int], cp: int) -> list[list[tuple[int, int]]]:
    """Per rank, (request, position) of each real row of the reference engine's split."""
    req = torch.repeat_interleave(torch.arange(len(extend)), torch.tensor(extend))
    pos = torch.cat([torch.arange(n) for n in extend])
    split = cp_split(extend, cp, req, pos, strategy="interleave")
    out = []
    for rank in range(cp):
        r, p = split.local(rank)
        keep = r >= 0
        out.append(list(zip(r[keep].tolist(), p[keep].tolist(), strict=True)))
    return out


def _check(extend: list[int], cp: int, deploy, mla) -> None:
    reqs = [dsa.Req(uid, n) for uid, n in enumerate(extend)]
    zeros = [0] * len(extend)
    up = deploy(cp).run(reqs, dsa.upstream_init_forward_metadata(), mla, forward=False)
    fixed = deploy(cp).run(reqs, dsa.hooked_init_forward_metadata(), mla, forward=False)
    total = sum(extend)
    applied = any(len(run.rows) != total for run in up)
    assert ragged_chunk_branch("interleave", cp, extend, zeros) == applied
    if not applied:  # no CP for this batch: every rank computes the whole chunk, offsets right
        for run in up:
            rows = [b for b, _ in run.rows]
            assert run.offsets == ragged_offsets(extend, rows, "fixed")
        return
    for rank, rows in enumerate(_engine_rows(extend, cp)):
        assert up[rank].rows == fixed[rank].rows == rows, f"rank {rank}"
        reqs_of_rows = [b for b, _ in rows]
        model = {rule: ragged_offsets(extend, reqs_of_rows, rule) for rule in RAGGED_RULES}
        assert model["upstream"] == up[rank].offsets == sglang_offsets(extend, zeros, cp, rank)
        assert model["fixed"] == fixed[rank].offsets == attended_offsets(extend, zeros, cp, rank)


@pytest.mark.parametrize(("cp", "extend"), FIXED, ids=[f"cp{c}-{e}" for c, e in FIXED])
def test_model_matches_sglang(cp, extend, deploy, mla):
    _check(extend, cp, deploy, mla)


def test_the_validate_shapes_are_misplaced_upstream_and_not_fixed():
    """What the scenarios rest on, from SGLang's side: [1, 6]@2 and [1, 1, 300]@4 each have a
    rank whose upstream offsets differ from the fixed ones (held to SGLang above)."""
    for cp, extend in ((2, [1, 6]), (4, [1, 1, 300])):
        zeros = [0] * len(extend)
        differ = [r for r in range(cp) if sglang_offsets(extend, zeros, cp, r)
                  != attended_offsets(extend, zeros, cp, r)]  # fmt: skip
        assert differ == ([1] if cp == 2 else [0, 1, 2, 3])


@pytest.mark.parametrize("prefix", [[4, 0], [0, 64], [64, 64]])
def test_a_prefix_in_the_batch_leaves_the_branch(prefix):
    """With any prefix, SGLang reads the kept requests' page table and its offsets agree with
    it (the hook's rule, held to SGLang in test_upstream_ragged_offsets): nothing to model."""
    extend = [1, 6]
    assert not ragged_chunk_branch("interleave", 2, extend, prefix)
    for rank in range(2):
        assert sglang_offsets(extend, prefix, 2, rank) == attended_offsets(extend, prefix, 2, rank)


extend_lists = st.lists(st.integers(1, 9), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extend=extend_lists, cp=st.sampled_from([2, 4]))
def test_model_matches_sglang_on_random_batches(extend, cp, deploy, mla):
    _check(extend, cp, deploy, mla)
