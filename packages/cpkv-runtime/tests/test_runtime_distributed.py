"""Real multi-process CP on CPU: gloo, 2 and 4 ranks, all-gather, localize, fill.

Every rank's dense buffer must equal the single-process result, bitwise.
"""

from __future__ import annotations

import multiprocessing
import socket

import _dist_worker
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _scenarios import SCENARIOS, Batch, pad

pytestmark = pytest.mark.skipif(not dist.is_gloo_available(), reason="torch built without gloo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch() -> Batch:
    """Shared prefix pages (one partial and written by all), a miss, uneven and empty extends."""
    base = SCENARIOS["shared_prefix_pages"]
    rows = pad([*base.req_pages, [30, 31, 29], [10, 11]], 4)
    return Batch("distributed", rows, [*base.prefix, 0, 16], [*base.extend, 19, 0], 8, 32, True)


def _launch(fn, args: tuple, nprocs: int) -> None:
    """torch.multiprocessing launch; "forkserver" with torch preloaded imports torch once instead
    of once per rank (``spawn`` costs ~3 s of imports per rank on a busy 2-core runner)."""
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    if method == "forkserver":
        multiprocessing.get_context(method).set_forkserver_preload(["torch", "_dist_worker"])
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method=method)


@pytest.mark.slow
def test_cp_all_gather_matches_single_process(tmp_path):
    """One launch of 4 ranks runs CP 4 on the world group and CP 2 on a 2-rank subgroup."""
    batch = _batch()
    _launch(_dist_worker.rank_main, (4, _free_port(), batch, str(tmp_path)), 4)
    want = _dist_worker.single_process_dense(batch)
    for world in (2, 4):
        for strategy in ("zigzag", "interleave"):
            for rank in range(world):
                got = torch.load(tmp_path / f"cp{world}-{strategy}-{rank}.pt")
                assert torch.equal(got, want), (world, strategy, rank)
