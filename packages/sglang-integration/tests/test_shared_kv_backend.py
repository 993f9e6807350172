"""cpkv's sharded pool under SGLang 0.5.23's own DSA attention, on CPU ranks under gloo.

One subprocess (``_skv_backend_worker.py``) starts four ranks. Per rank and deployment (every
configuration of ``_skv_backend_cases.CONFIGS`` at CP 4 on all ranks and at CP 2 on ranks 0-1)
the server arguments are resolved as ``cpkv-serve --cpkv-shared-kv`` resolves them, the pool class
comes from SGLang's registry after the plugin loaded, and the scenario runs through SGLang's
``DeepseekSparseAttnBackend`` and ``Indexer`` over cpkv's pool and over SGLang's replicated pool
(``_skv_backend_rank``); every indexer logit, top-k index, attention output and KV row read must
agree bitwise per (request, position), and every read must be one of the query's own causal
rows. Then each planted bug of ``MUTATIONS`` must make that comparison fail. What stands in for
the GPU is listed in ``_skv_backend_stand_ins.REPLACEMENTS`` and documented in
``docs/shared-kv.md``; everything that maps pages, rows or indices is checked to be the real code
before the runs (``check_originals``). Slow: about five minutes on two cores, most of it SGLang's
Triton kernels in Triton's interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _skv_backend_cases as cases
import pytest
import torch.distributed as dist
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
    results = []
    for rank in range(WORLD):
        path = out / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote nothing; worker stderr:\n{proc.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    return results


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


@pytest.mark.parametrize("cp", [4, 2])
def test_every_configuration_and_step_ran(ranks, cp):
    steps = len(cases.SCENARIO.steps)
    drafts = len(cases.SCENARIO.draft)
    for r in _ranks_of(cp, ranks):
        runs = [x for x in r["runs"] if x["tag"].startswith(f"cp{cp} ")]
        assert all(x["ok"] for x in runs)
        for config in cases.CONFIGS:
            mine = [x for x in runs if x["tag"].startswith(f"cp{cp} {config.name} ")]
            assert len(mine) == steps + drafts, (config.name, [x["tag"] for x in mine])
            want = (
                "PAGED"
                if config.kv_dtype == "bfloat16" or config.backend == "flashmla_kv"
                else "RAGGED"
            )
            assert {x["method"] for x in mine} == {want}, config.name


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
        caught = r["mutations"][mutation]
        assert set(caught) == set(cases.MUTATION_CONFIGS)
        for config, found in caught.items():
            assert found, f"rank {r['rank']}: {mutation} under {config} went unnoticed"


def test_a_batch_past_the_inverse_bound_is_refused(ranks):
    """At max_running_requests = 4: four requests run and agree with the replica; five are
    refused before any layer, with the bound in the message."""
    for r in _ranks_of(2, ranks):
        bound = r["inverse_bound"]
        assert bound["at_bound"] == "ok", bound
        assert bound["past_bound"].startswith("refused: this batch has 5 requests"), bound
        assert "max_running_requests = 4" in bound["past_bound"]
