"""cpkv's sharded pool under SGLang 0.5.23's own DSA attention, on CPU ranks under gloo.

One subprocess (``_skv_backend_worker.py``) starts four ranks. Per rank and deployment (every
configuration of ``_skv_backend_cases.CONFIGS`` at its CP sizes: CP 4 on all ranks, CP 2 on
ranks 0-1) the server arguments are resolved as ``cpkv-serve --cpkv-shared-kv`` resolves them,
the pool class comes from SGLang's registry after the plugin loaded, and the scenario runs
through SGLang's ``DeepseekSparseAttnBackend`` and ``Indexer`` over cpkv's pool and over SGLang's
replicated pool (``_skv_backend_rank``); every indexer logit, top-k index, attention output and
KV row read must agree bitwise per (request, position), and every read must be one of the
query's own causal rows. Then each planted bug of ``MUTATIONS`` and ``PATH_MUTATIONS`` must make
that comparison fail.

The configurations include, beside SGLang's torch top-k, its defaults ``SGLANG_DSA_FUSE_TOPK=1``
with ``--dsa-topk-backend sgl-kernel`` (the top-k fused with its page or offset transform; the
fused top-k must also read the rows the torch top-k reads), and the trtllm backend (SM100, raw
fp8 rows, its fused RoPE and fp8 cast, SGLang's fp8 KV gather under CP). After each step EAGLE's
prefill draft runs through SGLang's own ``EagleDraftWorker._draft_extend_for_prefill`` on the
draft pool: every draft row read must carry the target hidden state of its position and the
token after it (the shifted input ids).

What stands in for the GPU is listed in ``_skv_backend_stand_ins.REPLACEMENTS`` and documented
in ``docs/shared-kv.md``. For the paths added here: the fused top-k kernels (``sgl_kernel``'s
``fast_topk_transform_fused``/``_ragged_fused``, SGLang's JIT ``topk_transform_ragged_v2`` and
``plan_topk_v2``: CUDA only, sgl-kernel's built for k = 2048 alone, and their threads order the
selection and break ties at the k-th score, so two pools could not be held bitwise) by a torch
selection plus each kernel's own index transform, held to SGLang's torch top-k and unfused
transforms by ``test_skv_fused_topk_stand_ins.py``; trtllm's sparse MLA and fused RoPE + fp8
cast (flashinfer, SM100 only) by torch math, with the SM count and scratch its setup asks CUDA
for; EAGLE's draft ``ModelRunner`` and NextN weights (a GPU and GLM-5.1's checkpoint) by a
runner that runs SGLang's ``EagerRunner._execute_extend`` over marker weights. SGLang's dispatch
around them, the page tables, offsets and rows they are handed, and everything else that maps
pages, rows or indices is the real code, checked before the runs (``check_originals``).

Slow: three to four minutes on two cores, most of it SGLang's Triton kernels in Triton's
interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _skv_backend_cases as cases
import pytest
import torch.distributed as dist
from _gloo_rank import read_ranks
from _skv_backend_rank import SKIP_TOPK
from sglang_cpkv.plugin.table import SHARED_KV_SPECS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_gloo_available(), reason="torch built without gloo"),
]

WORKER = Path(__file__).parent / "_skv_backend_worker.py"
WORLD = 4


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("skv_backend")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(WORKER), str(out), "--world", str(WORLD)],
                          env=env, capture_output=True, text=True, timeout=3000)  # fmt: skip
    return read_ranks(out, WORLD, proc)


def _ranks_of(cp: int, ranks: list[dict]) -> list[dict]:
    return ranks[:cp]


def test_ranks_ran_sglang_over_cpkvs_pool(ranks):
    for r in ranks:
        assert r["error"] is None, r["error"]
        assert {s.name for s in SHARED_KV_SPECS} <= set(r["hooks"])
        assert r["classes"] == ["CpkvSharedKVPool", "DSATokenToKVPool"]
        assert r["originals_replaced"] == [], "code that maps pages/rows was replaced"


def test_every_read_matches_the_replicated_pool(ranks):
    for r in ranks:
        assert r["failures"] == [], f"rank {r['rank']}: {r['failures'][:5]}"


def _runs_of(ranks: list[dict], cp: int, config) -> list[dict]:
    return [x for r in _ranks_of(cp, ranks) for x in r["runs"]
            if x["tag"].startswith(f"cp{cp} {config.name} ")]  # fmt: skip


def _deployments() -> list[tuple[int, object]]:
    return [(cp, c) for c in cases.CONFIGS for cp in c.cps]


def _ragged(config) -> bool:
    """SGLang's RAGGED top-k transform: fp8 KV under flashmla_sparse or triton_sparse_mla."""
    return config.kv_dtype == "fp8_e4m3" and config.backend in (
        "flashmla_sparse",
        "triton_sparse_mla",
    )


@pytest.mark.parametrize("cp", [4, 2])
def test_every_configuration_and_step_ran(ranks, cp):
    steps = len(cases.SCENARIO.steps)
    drafts = len(cases.SCENARIO.draft)
    for r in _ranks_of(cp, ranks):
        runs = [x for x in r["runs"] if x["tag"].startswith(f"cp{cp} ")]
        assert all(x["ok"] for x in runs)
        for config in cases.CONFIGS:
            mine = [x for x in runs if x["tag"].startswith(f"cp{cp} {config.name} ")]
            want = steps + drafts if cp in config.cps else 0
            assert len(mine) == want, (config.name, [x["tag"] for x in mine])
            if mine:
                method = "RAGGED" if _ragged(config) else "PAGED"
                assert {x["method"] for x in mine} == {method}, config.name
                assert {x["impl"] for x in mine} == {config.backend}, config.name


@pytest.mark.parametrize(("cp", "config"), _deployments(), ids=lambda x: getattr(x, "name", x))
def test_fused_topk_runs_through_sglangs_fused_dispatch(ranks, cp, config):
    """With SGLANG_DSA_FUSE_TOPK on, every forward's top-k goes through SGLang's fused dispatch
    (``DSATopKBackend.topk_transform``): the PAGED kernel over the attention page table (its
    output, pool slots, is what attention reads), or the RAGGED v2 kernel with the offsets; the
    metadata builds the v2 plan once per forward. With it off, no fused kernel runs."""
    kernel = "topk_transform_ragged_v2" if _ragged(config) else "fast_topk_transform_fused"
    for x in _runs_of(ranks, cp, config):
        if not config.fused_topk:
            assert x["topk_kernels"] == {} and not x["topk_is_slots"], x["tag"]
            continue
        layers = 1 if " draft" in x["tag"] else SKIP_TOPK.count(False)
        assert x["topk_kernels"] == {kernel: layers, "plan_topk_v2": 1}, x
        assert x["topk_is_slots"] == (not _ragged(config)), x["tag"]


@pytest.mark.parametrize(
    ("cp", "config"),
    [(cp, c) for cp, c in _deployments() if c.fused_topk],
    ids=lambda x: getattr(x, "name", x),
)
def test_fused_topk_reads_the_rows_torch_topk_reads(ranks, cp, config):
    """The same deployment with SGLang's torch top-k and unfused transforms read, per forward,
    layer and query row, exactly the KV rows the fused one read (replica records)."""
    steps = len(cases.SCENARIO.steps) + len(cases.SCENARIO.draft)
    for r in _ranks_of(cp, ranks):
        same = r["fused_vs_torch"][f"cp{cp} {config.name}"]
        assert same == {"forwards": steps, "differ": []}, (r["rank"], same)


def test_trtllm_reads_raw_fp8_rows(ranks):
    """trtllm's sparse MLA read the pool's raw fp8 rows (576 B: no scales) through SGLang's
    trtllm page-table path; every other backend's kernel read bf16 rows (its own, or packed fp8
    dequantised by SGLang's paths)."""
    for cp, config in _deployments():
        want = "float8_e4m3fn x 576" if config.backend == "trtllm" else "bfloat16 x 576"
        assert {x["kv_read"] for x in _runs_of(ranks, cp, config)} == {want}, config.name


def test_eagle_prefill_draft_ran_sglangs_draft_extend(ranks):
    """Every draft forward is SGLang's ``_draft_extend_for_prefill`` (its rows carry the token
    fed at them, checked per row read against the shifted ids by the comparison); the target's
    rows carry none."""
    runs = [x for r in ranks for x in r["runs"]]
    assert all((x["fed_reads"] > 0) == (" draft" in x["tag"]) for x in runs)


def test_the_batches_cover_what_the_issue_names(ranks):
    """Radix hits with and without prefix, a rank holding none of a request's tokens, the
    no-prefix branch, and top-k below every sequence length in at least half the runs."""
    runs = [x for r in ranks for x in r["runs"]]
    assert any(x["rank_misses_a_request"] and x["prefix"] for x in runs)
    assert any(x["rank_misses_a_request"] and not x["prefix"] for x in runs)
    assert any(x["requests"] >= 4 and x["prefix"] for x in runs)
    below = sum(x["topk_below_every_seq"] for x in runs)
    assert 2 * below >= len(runs), (below, len(runs))
    assert all(x["reads"] > 0 for x in runs)


def test_each_table_is_translated_once_per_forward(ranks):
    """SGLang hands the pool the same metadata tables on every layer (the attention page table
    at init_forward_metadata, the indexer's logical page table per layer): the plan's lookup
    cache ends every forward (4 layers, or the draft's one) with those two entries, not one
    per layer."""
    lookups = {x["lookups"] for r in ranks for x in r["runs"]}
    assert lookups == {2}, sorted(lookups, key=str)


@pytest.mark.parametrize("mutation", list(cases.MUTATIONS))
def test_each_planted_bug_fails_the_comparison(ranks, mutation):
    for r in _ranks_of(2, ranks):
        caught = {c: f for c, f in r["mutations"][mutation].items() if c in cases.MUTATION_CONFIGS}
        assert set(caught) == set(cases.MUTATION_CONFIGS)
        for config, found in caught.items():
            assert found, f"rank {r['rank']}: {mutation} under {config} went unnoticed"


@pytest.mark.parametrize(
    ("mutation", "config", "scope"),
    [(m, c, s) for m, where in cases.PATH_MUTATIONS.items() for c, s in where],
)
def test_each_planted_bug_fails_the_new_paths(ranks, mutation, config, scope):
    """Under the fused top-k, trtllm and (scope ``draft``: planted in EAGLE's draft forwards
    alone) the prefill draft, each planted bug fails the comparison on some rank of CP 2 (the
    RAGGED offsets' only on the rank that misses a request)."""
    key = config + (" draft" if scope == "draft" else "")
    found = [r["mutations"][mutation][key] for r in _ranks_of(2, ranks)]
    assert any(found), f"{mutation} under {key} went unnoticed"
    if scope == "draft":
        assert all(" draft: " in f for per_rank in found for f in per_rank), found


def test_a_batch_past_the_inverse_bound_is_refused(ranks):
    """At max_running_requests = 4: four requests run and agree with the replica; five are
    refused before any layer, with the bound in the message."""
    for r in _ranks_of(2, ranks):
        bound = r["inverse_bound"]
        assert bound["at_bound"] == "ok", bound
        assert bound["past_bound"].startswith("refused: this batch has 5 requests"), bound
        assert "max_running_requests = 4" in bound["past_bound"]
