"""cpkv's sharded pool under SGLang's DSA attention, with pages from SGLang's allocator and radix
cache (issue 32, item 1, and item 2's batches below the CP size).

The backend suite (``test_shared_kv_backend.py``) imitates SGLang's sharded allocator. Here every
page and location comes from SGLang 0.5.23's own ``UnifiedRadixCache`` over
``PageInterleavePoolAllocator``, driven by the scheduler's functions (``_skv_radix_sched``):
radix matches at admission, eviction under memory pressure while a batch is allocated, chunked
prefill with checkpoints, release at finish, an abort mid-prefill, and freed pages re-used by
requests with other prefixes. Each batch runs on two CP ranks under gloo through SGLang's
``DeepseekSparseAttnBackend`` and ``Indexer`` over cpkv's pool and over SGLang's replicated pool
(``_skv_radix_worker``), bitwise per (request, position), and after every forward each rank's
pages of cpkv's pool, located by SGLang's ``PageInterleavePlacement``, must equal the replica's.
What stands in for the GPU is ``_skv_backend_stand_ins.REPLACEMENTS`` (math and environment
only; ``check_originals`` holds everything that maps pages, rows or indices to the shipped code);
the allocator, the radix cache (its Rust tree core) and the request pool are not replaced at all.
About a minute and a half on two cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _skv_radix_cases as cases
import pytest
import torch.distributed as dist
from _gloo_rank import read_ranks
from sglang_cpkv.plugin.table import SHARED_KV_SPECS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_gloo_available(), reason="torch built without gloo"),
]

WORKER = Path(__file__).parent / "_skv_radix_worker.py"
WORLD = 2
PLAIN = [c.name for c in cases.CONFIGS]
EAGLE = cases.EAGLE_CONFIG.name


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("skv_radix")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(WORKER), str(out)], env=env,
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    return read_ranks(out, WORLD, proc)


def _runs(r: dict, config: str) -> list[dict]:
    return [x for x in r["runs"] if x["tag"].startswith(f"{config} step ")]


def _zip(a: list, b: list) -> zip:
    return zip(a, b, strict=True)


def _step(run: dict) -> int:
    return int(run["tag"].rsplit(" ", 1)[1])


def test_ranks_ran_sglang_over_cpkvs_pool(ranks):
    for r in ranks:
        assert r["error"] is None, r["error"]
        assert {s.name for s in SHARED_KV_SPECS} <= set(r["hooks"])
        assert r["classes"] == ["CpkvSharedKVPool", "DSATokenToKVPool"]
        assert r["originals_replaced"] == [], "code that maps pages/rows was replaced"


def test_every_step_matches_the_replica_in_reads_and_pool(ranks):
    for r in ranks:
        assert r["failures"] == [], f"rank {r['rank']}: {r['failures'][:5]}"
        for config, script in [*((c, cases.SCRIPT) for c in PLAIN), (EAGLE, cases.EAGLE_SCRIPT)]:
            runs = _runs(r, config)
            assert [_step(x) for x in runs] == list(range(len(script))), config
            assert all(x["ok"] and x["reads"] > 0 for x in runs), config


def test_the_ranks_made_the_same_page_decisions(ranks):
    """SGLang's allocator and tree are mirrored per rank (SPMD): equal decisions everywhere."""
    keys = ("lens", "pages", "bases", "evicted", "evicted_pages", "reused", "free_after")
    first = [{k: x[k] for k in keys} for x in ranks[0]["runs"]]
    for r in ranks[1:]:
        assert [{k: x[k] for k in keys} for x in r["runs"]] == first


@pytest.mark.parametrize("config", PLAIN)
def test_the_script_reached_what_item_1_names(ranks, config):
    """Hits on tree pages, a chunked continuation, an eviction whose pages a new prefix took in
    the same allocation, those pages read back as history, the abort's pages freed and its
    published chunk hit, a rotation base other than 0 (so page owners are not positions)."""
    runs = _runs(ranks[0], config)
    lens = {(_step(x), name): (q, e) for x in runs for name, q, e in x["lens"]}
    pages = {(_step(x), n): p for x in runs for (n, _, _), p in _zip(x["lens"], x["pages"])}
    assert lens[1, "A"] == (64, 1) and lens[1, "B"] == (64, 10)  # chunk, hit on A's chunk
    assert pages[1, "B"][0] == pages[0, "A"][0]
    evicting = [x for x in runs if x["evicted"]]
    assert evicting and all(len(x["evicted_pages"]) * 64 == x["evicted"] for x in evicting)
    taken = {  # evicted pages a new prefix took in the same allocation
        page
        for x in evicting
        for page, name in x["reused"]
        if lens[_step(x), name][0] == 0 and page in x["evicted_pages"]
    }
    assert taken, "no new prefix was allocated into evicted pages"
    later = [x for x in runs if _step(x) > _step(evicting[0])]
    history = {
        p for x in later for (_, q, _), ps in _zip(x["lens"], x["pages"]) for p in ps[: q // 64]
    }
    assert taken & history, "no later hit read the re-used pages"
    aborted = pages[5, "K"]
    assert aborted[1] in runs[5]["free_after"], "the aborted chunk's page was not freed"
    assert lens[6, "M"] == (64, 5) and pages[6, "M"][0] == aborted[0]
    assert any(b not in (0, None) for x in runs for b in x["bases"])


@pytest.mark.parametrize("config", PLAIN)
def test_one_token_after_a_full_hit_runs_without_the_split(ranks, config):
    """Item 2: a prompt whose first ``len - 1`` tokens are cached (a cached chunk and one new
    token, then an exact repeat) extends one token, below CP 2, so SGLang does not split it;
    its page is rank 1's in one step, rank 0's in the other."""
    small = [x for x in _runs(ranks[0], config) if not x["split"]]
    assert [(x["tokens"], x["lens"][0][1]) for x in small] == [(1, 64), (1, 64)]
    owners = {x["pages"][0][-1] % WORLD for x in small}
    assert owners == {0, 1}


def test_under_eagle_a_full_hit_extends_two_tokens(ranks):
    """EAGLE keys the tree by bigrams and caps a match at ``page_floor(len - 2)``: the repeated
    130-token prompt hits 128 and extends two tokens, one per rank (split at CP 2)."""
    for r in ranks:
        last = _runs(r, EAGLE)[-1]
        assert last["lens"] == [["C", 128, 2]] and last["split"] and last["rows"] == 1


@pytest.mark.parametrize("mutation", list(cases.MUTATIONS))
def test_each_planted_bug_fails_the_comparison(ranks, mutation):
    for r in ranks:
        caught = r["mutations"][mutation]
        assert set(caught) == set(cases.MUTATION_CONFIGS)
        for config, found in caught.items():
            assert found, f"rank {r['rank']}: {mutation} under {config} went unnoticed"


def _first_step(ranks: list[dict], mutation: str, config: str) -> int:
    steps = {int(f.split(" step ", 1)[1].split(":", 1)[0])
             for r in ranks for f in r["mutations"][mutation][config]}  # fmt: skip
    return min(steps)


@pytest.mark.parametrize("config", cases.MUTATION_CONFIGS)
def test_each_bug_is_caught_where_sglang_exposes_it(ranks, config):
    """The stale page only once a hit reads pages re-used after the eviction; the unsplit batch
    at the one-token step; the wrong owner at the first chain rotated from rank 1."""
    runs = _runs(ranks[0], config)
    evicted_at = min(_step(x) for x in runs if x["evicted"])
    assert _first_step(ranks, "gathered_page_memo", config) > evicted_at
    assert not runs[_first_step(ranks, "unsplit_batch_persisted_as_split", config)]["split"]
    first_rotated = min(_step(x) for x in runs if any(b not in (0, None) for b in x["bases"]))
    assert _first_step(ranks, "owner_by_position", config) == first_rotated
