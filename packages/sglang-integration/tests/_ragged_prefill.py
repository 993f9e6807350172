"""Fixtures that build SGLang's RAGGED prefill under interleave CP, for the tests that run it.

``test_upstream_ragged_offsets.py`` (reads and outputs) and ``test_upstream_validate_ragged.py``
(cpkv-validate's model of the offsets) drive the same deployment: GLM-5.1-FP8 on an emulated SM100
with ``flashmla_sparse`` prefill over the packed fp8 KV pool, which takes SGLang's RAGGED top-k
transform. Each test module binds both fixtures at its top level; their module scope then gives
each such module its own stand-ins and its own deployments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import _dsa_stand_ins as stand_ins
import _sglang_dsa as dsa
import _sglang_env as env
import pytest


@pytest.fixture(scope="module")
def mla(plugin) -> Iterator[stand_ins.SparseMLA]:
    """The stand-ins, installed for the importing module; yields the sparse-MLA recorder.

    Metadata-only runs (``forward=False``) take it too and leave it unused.
    """
    with pytest.MonkeyPatch.context() as mp, stand_ins.cuda_stand_ins(mp) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def deploy(plugin) -> Callable[[int], dsa.DsaPrefill]:
    """SM100 deployments of GLM-5.1-FP8 with flashmla_sparse over fp8 KV, by CP size (cached)."""
    cache: dict[int, dsa.DsaPrefill] = {}

    def get(cp: int) -> dsa.DsaPrefill:
        if cp not in cache:
            args = dsa.server_args(cp, env.SM100, *dsa.FLASHMLA_SPARSE_FP8)
            cache[cp] = dsa.DsaPrefill(args, env.SM100)
        return cache[cp]

    return get
