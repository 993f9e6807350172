"""Rank body of the multi-process CP test (launched by torch.multiprocessing, imported by name)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import _oracle
import cpkv_runtime as cr
import torch
import torch.distributed as dist
from _scenarios import Batch, pool_for


def toy_kv(token_req: torch.Tensor, token_pos: torch.Tensor) -> torch.Tensor:
    """What a rank 'computes' for its tokens: (N, 4) int32 rows naming request and position."""
    req, pos = token_req.int(), token_pos.int()
    return torch.stack([-1 - req, pos, req * 1000 + pos, torch.full_like(req, 9)], dim=1)


def single_process_dense(batch: Batch) -> torch.Tensor:
    layout = batch.plan()
    token_req, token_pos, loc = cr.current_tokens(layout)
    dense = cr.materialize(pool_for(batch), layout)
    return cr.fill_current(dense, toy_kv(token_req, token_pos), token_req, loc, layout)


def rank_main(rank: int, world: int, port: int, batch: Batch, out_dir: str) -> None:
    """Run CP over all ``world`` ranks and over a 2-rank subgroup, both strategies."""
    os.environ["CPKV_BACKEND"] = "torch"  # no plugin imports in the children: fast start
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        pair = dist.new_group([0, 1])  # every rank takes part in creating it
        _run(rank, world, None, batch, Path(out_dir))
        if rank < 2:
            _run(rank, 2, pair, batch, Path(out_dir))
    finally:
        dist.destroy_process_group()


def _run(rank: int, world: int, group, batch: Batch, out_dir: Path) -> None:
    """One CP round per strategy: split, compute local rows, all-gather, order, localize, fill."""
    layout = batch.plan()
    token_req, token_pos, loc = cr.current_tokens(layout)
    kv_pool = pool_for(batch)
    for strategy in ("zigzag", "interleave"):
        split = cr.cp_split(layout.extend_lens, world, token_req, token_pos, loc, strategy=strategy)
        # this rank computes exactly the tokens the rule gives it, in its order, padded alike
        assert split.rows[rank].tolist() == _oracle.cp_split(batch.extend, world, strategy)[rank]
        req_l, pos_l, _ = split.local(rank)
        kv_local = toy_kv(req_l, pos_l)  # this rank's slice of the current KV
        gathered = torch.empty(split.padded_len, 4, dtype=kv_local.dtype)
        dist.all_gather_into_tensor(gathered, kv_local, group=group)
        as_list = [torch.empty_like(kv_local) for _ in range(world)]
        dist.all_gather(as_list, kv_local, group=group)
        current_kv = cr.gather_order(gathered, split)
        assert torch.equal(current_kv, cr.gather_order(as_list, split))
        mine = cr.localize(current_kv, split, rank)  # back to this rank's compute rows
        valid = split.valid[rank]
        assert mine.shape == kv_local.shape and torch.equal(mine[valid], kv_local[valid])
        dense = cr.materialize(kv_pool, layout)
        cr.fill_current(dense, current_kv, token_req, loc, layout)
        cr.check_invariants(layout, kv_pool, dense, current_kv, token_req, loc)
        torch.save(dense, out_dir / f"cp{world}-{strategy}-{rank}.pt")
