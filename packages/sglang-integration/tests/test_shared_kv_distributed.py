"""cpkv's sharded DSA pool as SGLang 0.5.23 builds it, on CPU under gloo at CP 4 and CP 2.

The pools and ``prepare_kv_shard_forward`` are SGLang's; its attention backend is not run here
(``test_shared_kv_backend.py`` runs the pool under SGLang's ``DeepseekSparseAttnBackend``).

One subprocess (``_skv_dist_worker.py``, ``TRITON_INTERPRET=1`` so SGLang's Triton bf16 store
kernel runs on CPU) starts four ranks; each resolves a GLM-5.1 deployment with SGLang for an
emulated H200 and loads the plugin with ``CPKV_SHARED_KV=1`` through SGLang's ``load_plugins()``, so
``PageInterleaveDSATokenToKVPool`` *is* cpkv's subclass. For every shape of
``_skv_shapes.SHAPES``, with a bf16 and a packed-fp8 pool, both pool classes write the history
through their sharded write path, run the extend forward through SGLang's (hooked)
``prepare_kv_shard_forward``, and every request reads through the translated page table; the
reference is SGLang's unsharded ``DSATokenToKVPool`` (history as before the forward, current
rows as written). The two test doubles are listed in the worker's docstring (the NCCL
communicator, replaced by gloo; SGLang's fp8 quantizing store kernel, replaced by its torch
stand-in). Slow: the Triton interpreter runs SGLang's bf16 store kernel, four ranks share the
runner's cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from _gloo_rank import read_ranks
from _skv_dist_worker import FP8_SHAPES
from _skv_shapes import SHAPES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_gloo_available(), reason="torch built without gloo"),
]

WORKER = Path(__file__).parent / "_skv_dist_worker.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("skv")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CPKV_SHARED_KV": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(out)], env=env, capture_output=True, text=True,
        timeout=3000,
    )  # fmt: skip
    return read_ranks(out, 4, proc)


def test_ranks_ran_the_real_pools(ranks):
    for r in ranks:
        assert r["error"] is None, r["error"]
        assert r["classes"] == ["CpkvSharedKVPool", "PageInterleaveDSATokenToKVPool"]


def test_every_request_reads_the_full_replica_rows(ranks):
    """Latent rows and indexer keys/scales: every shape with bf16 and the partial-page ones
    with packed fp8, at CP 4 (every rank) and CP 2 (ranks 0 and 1)."""
    want = [
        f"cp{cp} {d} {name}"
        for cp in (4, 2)
        for d in ("bf16", "fp8")
        for name in SHAPES
        if d == "bf16" or name in FP8_SHAPES
    ]
    for rank, r in enumerate(ranks):
        assert r["failures"] == [], f"rank {rank}: {r['failures'][:5]}"
        assert r["covered"] == (want if rank < 2 else [t for t in want if t.startswith("cp4")])
        # the requests this rank read: SGLang's kept rows (bs_idx) of its split, which the
        # worker held the plan's table_req to; each of them checked at both layers
        rows = {t: r["rows"][t] for t in r["covered"]}
        assert all(rows[t] and set(rows[t]) <= set(range(len(SHAPES[t.split()[2]]))) for t in rows)
        assert r["checks"] == 2 * sum(len(v) for v in rows.values())
    for tag in want:  # every request of a case is read on some rank of its CP group
        cp = int(tag.split()[0].removeprefix("cp"))
        read = set().union(*(r["rows"][tag] for r in ranks[:cp]))
        assert read == set(range(len(SHAPES[tag.split()[2]]))), tag


def test_batch_size_one_reads_what_sglang_reads(ranks):
    for r in ranks:
        assert r["bs1"] and all(ok for _, ok in r["bs1"]), r["bs1"]


def test_sglang_map_is_right_on_sglang_shaped_batches(ranks):
    """The value-keyed map is fine while prefixes are page-aligned and current pages fresh."""
    for r in ranks:
        assert r["upstream"] and all(ok for _, ok in r["upstream"]), [
            w for w, ok in r["upstream"] if not ok
        ]


def test_forced_foreign_page(ranks):
    """A page one request writes while another reads it as history: SGLang's _page_pos hands the
    reader the writer's rows; cpkv's plan gives it its history (and the writer its own rows)."""
    for r in ranks:
        by_pool = {}
        for f in r["forced"]:
            by_pool.setdefault(f["pool"].rsplit(" ", 1)[1], []).append(f)
        assert len(by_pool["cpkv"]) == len(by_pool["sglang"]) >= 2  # bf16 and fp8, per CP
        for f in by_pool["sglang"]:
            assert f["req1_reads_req0_rows"] and not f["req1_reads_history"], f
        for f in by_pool["cpkv"]:
            assert f["req1_reads_history"] and f["req0_reads_own"], f
            assert not f["req1_reads_req0_rows"], f
