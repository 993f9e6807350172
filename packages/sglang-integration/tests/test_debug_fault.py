"""The debug-only plants: ``CPKV_DEBUG_FAULT=swap-kv-pages`` really makes a served batch read
another request's KV, on SGLang's own code path, and is refused without its acknowledgement;
``CPKV_DEBUG_BREAK_HOOK`` must name a registered hook.

The fault runs against SGLang 0.5.23's ``DeepseekSparseAttnBackend`` (``init_forward_metadata``,
``forward_extend``) through the DSA prefill harness ``_sglang_dsa.py``: CUDA-only kernels are
replaced as ``_dsa_stand_ins.REPLACEMENTS`` lists; the page table the fault swaps is SGLang's.
What ``load_plugins()`` does with the fault's hooks in a started process (both on their targets,
the ``cpkv[hooks]`` line, the dry run's line) is ``test_plugin_processes.py``'s.
"""

from __future__ import annotations

from types import SimpleNamespace

import _dsa_stand_ins as stand_ins
import _sglang_dsa as dsa
import _sglang_env as env
import pytest
import torch
from sglang_cpkv.errors import DebugPlantError
from sglang_cpkv.plugin import _debug
from sglang_cpkv.plugin._framework import check_target
from sglang_cpkv.plugin.entry import enabled_specs
from sglang_cpkv.plugin.hooks.swap_kv_pages import (
    init_forward_metadata_swapped,
    out_graph_metadata_swapped,
)
from sglang_cpkv.plugin.table import FAULT_SPECS, SHARED_KV_SPECS, SPECS

pytestmark = env.SGLANG_IMPORT_WARNINGS

FAULT = {_debug.FAULT_ENV: "swap-kv-pages"}
ACKED = {**FAULT, _debug.ACK_ENV: _debug.ACK}


@pytest.fixture(scope="module")
def mla(plugin):
    with pytest.MonkeyPatch.context() as mp, stand_ins.cuda_stand_ins(mp) as recorder:
        yield recorder


@pytest.mark.slow
def test_swap_kv_pages_makes_each_request_attend_over_the_others_kv(mla):
    """Two requests with a cached prefix each, on one GPU (fp8 KV, flashmla_sparse prefill:
    the sparse kernel reads the KV dequantised through SGLang's flattened page table): without
    the fault each query reads its own request's tokens; with it, request 0's queries read
    request 1's KV and the other way round."""
    args = dsa.server_args(1, env.SM100, *dsa.FLASHMLA_SPARSE_FP8)
    prefill = dsa.DsaPrefill(args, env.SM100)
    reqs = [dsa.Req(0, 3, prefix=64), dsa.Req(1, 3, prefix=64)]
    upstream = dsa.upstream_init_forward_metadata()
    seen = []

    def faulty(backend, fb):
        own = fb.req_pool_indices
        init_forward_metadata_swapped(upstream, backend, fb)
        seen.append((fb.req_pool_indices is own, backend.forward_metadata.page_table_1[:, 0]))

    (clean,) = prefill.run(reqs, upstream, mla)
    (swapped,) = prefill.run(reqs, faulty, mla)
    for (b, pos), reads in zip(clean.rows, clean.reads, strict=True):
        assert reads == dsa.expected_reads(reqs[b], pos)
    for (b, pos), reads in zip(swapped.rows, swapped.reads, strict=True):
        assert reads == dsa.expected_reads(reqs[1 - b], pos), (b, pos, reads)
    (restored, first_slots), = seen  # fmt: skip
    assert restored  # the batch keeps its own indices for everything after the metadata
    pools = dsa.pool_locs(reqs)
    assert first_slots.tolist() == [pools[1][0], pools[0][0]]


def _recording_original():
    calls = []

    def original(self, forward_batch, in_capture=False):
        calls.append((forward_batch.req_pool_indices.tolist(), in_capture))

    return original, calls


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (SimpleNamespace(batch_size=3, req_pool_indices=torch.tensor([5, 7, 9])), [7, 5, 9]),
        (SimpleNamespace(batch_size=1, req_pool_indices=torch.tensor([5])), [5]),
        # a CUDA-graph replay view: one real request, one padding row (SGLang's row 0)
        (SimpleNamespace(batch_size=2, num_padding=1, req_pool_indices=torch.tensor([5, 0])),
         [5, 0]),
        (SimpleNamespace(batch_size=2, num_padding=0, req_pool_indices=torch.tensor([5, 8])),
         [8, 5]),
    ],
)  # fmt: skip
def test_only_two_real_requests_are_swapped(batch, expected):
    own = batch.req_pool_indices
    for hook in (init_forward_metadata_swapped, out_graph_metadata_swapped):
        original, calls = _recording_original()
        hook(original, None, batch)
        assert calls == [(expected, False)]
        assert batch.req_pool_indices is own


def test_the_graph_capture_is_left_alone():
    batch = SimpleNamespace(batch_size=2, req_pool_indices=torch.tensor([5, 8]))
    original, calls = _recording_original()
    out_graph_metadata_swapped(original, None, batch, in_capture=True)
    assert calls == [([5, 8], True)]


def test_the_fault_is_refused_without_its_acknowledgement():
    plain = enabled_specs(env={})
    with pytest.raises(DebugPlantError) as refused:
        enabled_specs(env=FAULT)
    assert str(refused.value) == (
        "CPKV_DEBUG_FAULT=swap-kv-pages plants a fault that serves wrong answers on purpose (in "
        "every batch of two or more requests SGLang's DSA backend reads the first two requests' "
        "page-table rows exchanged, so each attends over the other's KV); it is for the GPU "
        "suite's contamination check and runs only with CPKV_DEBUG_FAULT_ACK=i-want-wrong-output."
        " Fix: unset CPKV_DEBUG_FAULT."
    )
    with pytest.raises(DebugPlantError, match=r"\(got CPKV_DEBUG_FAULT_ACK='yes'\)"):
        enabled_specs(env={**FAULT, _debug.ACK_ENV: "yes"})
    with pytest.raises(DebugPlantError, match="names no debug fault"):
        enabled_specs(env={_debug.FAULT_ENV: "swap-kv", _debug.ACK_ENV: _debug.ACK})
    assert enabled_specs(env={_debug.ACK_ENV: _debug.ACK}) == plain  # an ack alone plants nothing
    assert enabled_specs(env=ACKED) == (*plain, *FAULT_SPECS["swap-kv-pages"])


def test_the_fault_is_no_hook_of_the_table():
    from sglang_cpkv.serve import _hook_table

    assert set(FAULT_SPECS) == set(_debug.FAULTS)
    names = {s.name for specs in FAULT_SPECS.values() for s in specs}
    assert not names & {s.name for s in (*SPECS, *SHARED_KV_SPECS)}
    assert not names & {r["name"] for r in _hook_table.rows()}
    assert all(s.why.startswith("DEBUG FAULT") for s in FAULT_SPECS["swap-kv-pages"])


@pytest.mark.parametrize("spec", FAULT_SPECS["swap-kv-pages"], ids=lambda s: s.name)
def test_the_fault_targets_have_the_parameters_it_wraps(spec):
    check_target(spec)


def test_the_break_must_name_a_registered_hook():
    names = [s.name for s in SPECS]
    assert _debug.broken_hook(names, env={}) is None
    assert _debug.broken_hook(names, env={_debug.BREAK_ENV: "dsa-backends"}) == "dsa-backends"
    with pytest.raises(DebugPlantError, match=r"CPKV_DEBUG_BREAK_HOOK='shared-kv-pool' names no "):
        _debug.broken_hook(names, env={_debug.BREAK_ENV: "shared-kv-pool"})
