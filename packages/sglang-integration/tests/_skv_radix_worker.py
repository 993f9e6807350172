"""Ranks of the shared-KV suite on SGLang's own allocator and radix cache (CPU, gloo).

``python _skv_radix_worker.py OUT_DIR [--configs ..] [--no-mutations]`` starts two
processes, the two ranks of a CP 2 deployment. Per configuration each rank resolves the
deployment as ``cpkv-serve --cpkv-shared-kv`` does (``_skv_backend_rank.Deployment``), builds
SGLang's scheduler state (``_skv_radix_sched.Scheduler``: ``UnifiedRadixCache`` over
``PageInterleavePoolAllocator``) and runs its script (``_skv_radix_cases``) through it; every step's
batch, exactly as SGLang allocated it, goes through SGLang's ``DeepseekSparseAttnBackend`` and
``Indexer`` over cpkv's pool and over SGLang's replicated pool (``_skv_backend_rank.run_forward``)
and must agree bitwise (``compare``). After every forward each rank also reads its own pages of
cpkv's pool where SGLang's ``PageInterleavePlacement`` puts them and holds them bitwise equal to
the replica's logical pages (latent KV and indexer keys, every layer): what a later hit gathers,
or the PD sender sends. Then each planted bug of ``MUTATIONS`` reruns the script on a fresh
scheduler and pool against the clean run's records. Each rank writes ``OUT_DIR/rank<r>.json``.

Environment as in ``_skv_backend_worker`` (set here): ``CPKV_SHARED_KV=1``,
``SGLANG_DSA_FUSE_TOPK=0``, ``TRITON_INTERPRET=1``, ``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _gloo_rank import free_port, gloo_rank

sys.path.insert(0, str(Path(__file__).parent))

WORLD = CP = 2


def build_sides(dep: Any, req_to_token: Any, *, replica: bool, local_pages: int) -> dict:
    """cpkv's sharded pool (and the replica) for the target layers, ``local_pages`` per rank: the
    per-rank size SGLang gives both the pool and ``PageInterleavePoolAllocator``."""
    import _skv_backend_rank as rank_mod
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    n, p = dep.cp, rank_mod.P
    spec = dep.shard_spec()
    kwargs = dep._pool_kwargs(0, rank_mod.LAYERS, rank_mod.SKIP_TOPK)
    sharded = dep.sharded_pool_class()
    pools = {"cpkv": sharded(local_pages * p, shard_spec=spec, shard_group=dep.group, **kwargs)}
    if replica:  # indexed by logical locations: every page the allocator can hand out
        pools["replica"] = DSATokenToKVPool(n * (local_pages + 1) * p, **kwargs)
    sides = {}
    for name, pool in pools.items():  # no draft: the NextN pool is another item's
        backend = dep._backend(pool, req_to_token, draft=False)
        sides[name] = rank_mod.Side(name, pool, None, backend, None, dep._indexer(0), None)
    return sides


def snapshot(pool: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(latent KV, indexer keys) of every layer of the replica, cloned."""
    return [(pool.kv_buffer[i].clone(), pool.index_k_with_scale_buffer[i].clone())
            for i in range(pool.layer_num)]  # fmt: skip


def pool_differences(pool: Any, replica: list, local_pages: int) -> list[str]:
    """This rank's pages of cpkv's pool, located by SGLang's ``PageInterleavePlacement``, that
    differ from the replica's logical pages (local page 0, SGLang's padding page, skipped)."""
    from sglang.srt.mem_cache.page_interleave import PageInterleavePlacement

    spec = pool.shard_spec
    n, p, rank = spec.shard_size, spec.page_size, spec.shard_rank
    placement = PageInterleavePlacement(spec)
    pages = torch.arange(n, n * (local_pages + 1))
    pages = pages[placement.owner_of(pages * p) == rank]
    locs = (pages[:, None] * p + torch.arange(p)).reshape(-1)
    local = placement.local_index(locs)
    bad = []
    for layer, (kv, index) in enumerate(replica):
        ours = pool.kv_buffer[layer][local].view(len(pages), -1)
        rows = kv[locs].view(len(pages), -1)
        differ = (ours.view(torch.uint8) != rows.view(torch.uint8)).any(1)
        if index.shape[0]:
            ours_i = pool.index_k_with_scale_buffer[layer][local[::p] // p]
            differ |= (ours_i != index[pages]).reshape(len(pages), -1).any(1)
        if differ.any():
            bad.append(f"layer {layer}: rank {rank}'s pages {pages[differ].tolist()} differ "
                       f"from the replica's")  # fmt: skip
    return bad


def _agree(flag: bool) -> bool:
    """Whether any rank raised ``flag`` (all ranks stop a mutated run at the same step)."""
    t = torch.tensor([int(flag)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _spec_algorithm() -> Any:
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    alg = get_spec().speculative_algorithm
    return alg if isinstance(alg, SpeculativeAlgorithm) else SpeculativeAlgorithm.from_string(alg)


def run_script(dep: Any, script: Sequence[Any], refs: dict, result: dict, *, tag: str,
               mutation: Any = None) -> list[str]:  # fmt: skip
    """The script on a fresh scheduler and pools; returns the differences found. The replica
    runs only when ``refs`` holds no record of a step yet (a mutated run compares with the
    clean run's records and pool snapshots, and must make the same page decisions)."""
    import contextlib

    import _skv_backend_rank as rank_mod
    import _skv_radix_cases as cases
    from _skv_radix_sched import Scheduler
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.runtime_context import get_disagg, get_memory

    # need_sort as kv_cache_configurator sets it: a PD prefill node sorts its free pages
    need_sort = get_disagg().disaggregation_mode in ("decode", "prefill")
    r2t = ReqToTokenPool(size=rank_mod.MAX_REQUESTS, max_context_len=4096, device="cpu",
                         enable_memory_saver=False)  # fmt: skip
    sides = build_sides(dep, r2t, replica="steps" not in refs, local_pages=cases.LOCAL_PAGES)
    sched = Scheduler(
        dep.cp, cases.LOCAL_PAGES, rank_mod.P, dep.model_config, _spec_algorithm(), need_sort,
        eviction_policy=get_memory().radix_eviction_policy, kvcache=sides["cpkv"].pool, r2t=r2t,
    )  # fmt: skip
    refs.setdefault("steps", {})
    result.setdefault("classes", [type(s.pool).__qualname__ for s in sides.values()])
    bad: list[str] = []
    topk = dep.config.index_topk
    for k, step in enumerate(script):
        for name, tokens in step.admit:
            sched.admit(name, tokens)
        sc = sched.schedule(step.batch)
        rows = sc.rows
        # The forward batch's locations (read back from req_to_token) are SGLang's allocation.
        table = sched.r2t.req_to_token
        fb_loc = torch.cat([table[r.req.row, r.prefix : r.seq] for r in rows]).long()
        assert torch.equal(fb_loc, sc.out_cache_loc.long()), f"{tag} step {k}"
        decisions = [sc.pages, [(r.prefix, r.extend) for r in rows], sc.evicted, sc.reused]
        what = f"{tag} step {k}"
        if k not in refs["steps"]:
            ref = rank_mod.run_forward(dep, sides["replica"], rows, sched.r2t, dep.calls,
                                       draft=False)  # fmt: skip
            refs["steps"][k] = (ref, snapshot(sides["replica"].pool), decisions)
        ref, replica_pool, ref_decisions = refs["steps"][k]
        assert decisions == ref_decisions, f"{what}: SGLang decided otherwise than in the clean run"
        found: list[str] = []
        try:
            with mutation() if mutation is not None else contextlib.nullcontext():
                ours = rank_mod.run_forward(dep, sides["cpkv"], rows, sched.r2t, dep.calls,
                                            draft=False)  # fmt: skip
            found += [f"forward: {f}" for f in rank_mod.compare(ours, ref, topk)]
        except Exception as exc:
            if mutation is None:
                raise
            found.append(f"forward raised {type(exc).__name__}: {str(exc)[:160]}")
            ours = None
        found += [f"pool: {f}" for f in pool_differences(sides["cpkv"].pool, replica_pool,
                                                          cases.LOCAL_PAGES)]  # fmt: skip
        bad += [f"{what}: {f}" for f in found]
        if mutation is None:
            total = sum(r.extend for r in rows)
            result["runs"].append({
                "tag": what, "ok": not found, "method": ours.method, "requests": len(rows),
                "tokens": total, "rows": len(ours.rows), "split": len(ours.rows) < total,
                "lens": [(r.req.name, r.prefix, r.extend) for r in rows],
                "pages": sc.pages, "bases": sc.bases, "evicted": sc.evicted,
                "evicted_pages": sc.evicted_pages,
                "reused": sc.reused,
                "rank_misses_a_request": len({r.req.name for r, _ in ours.rows}) < len(rows),
                "reads": sum(len(x) for lay in ours.layers for x in lay.reads),
            })  # fmt: skip
        elif _agree(bool(found)):  # caught: every rank stops here
            return bad or [f"{what}: another rank found a difference"]
        for name in step.checkpoint:
            sched.checkpoint(name)
        for name in step.finish:
            sched.finish(name)
        for name in step.abort:
            sched.abort(name)
        if mutation is None:
            result["runs"][-1]["free_after"] = sched.free_pages()
    return bad


def rank_main(rank: int, world: int, port: int, out_dir: str, opts: dict) -> None:
    torch.set_num_threads(1)
    result: dict = {"rank": rank, "error": None, "failures": [], "runs": [], "mutations": {},
                    "originals_replaced": None, "seconds": {}}  # fmt: skip
    with gloo_rank(rank, world, port, out_dir, result, timeout_s=600):
        import _skv_backend_rank as rank_mod
        import _skv_backend_stand_ins as stand_ins
        import _skv_radix_cases as cases
        import pytest
        from _skv_backend_worker import FIXTURE, SM90
        from _skv_dist_worker import _coordinator
        from sglang_cpkv.plugin.entry import activate

        result["hooks"] = list(activate())
        group = _coordinator([list(range(CP))], rank, "gloo", "cpkv_radix_cp2", local_rank=rank)
        runs = [*((c, cases.SCRIPT) for c in cases.CONFIGS),
                (cases.EAGLE_CONFIG, cases.EAGLE_SCRIPT)]  # fmt: skip
        runs = [(c, s) for c, s in runs if not opts["configs"] or c.name in opts["configs"]]
        device = torch.device("cpu")
        with pytest.MonkeyPatch.context() as mp, stand_ins.installed(mp, device) as calls:
            result["originals_replaced"] = stand_ins.check_originals()
            for config, script in runs:
                t1 = time.monotonic()
                dep = rank_mod.Deployment(config, CP, rank, group, device, FIXTURE, SM90)
                dep.calls = calls
                with dep.context():
                    refs: dict = {}
                    result["failures"] += run_script(dep, script, refs, result,
                                                     tag=config.name)  # fmt: skip
                    if opts["mutations"] and config.name in cases.MUTATION_CONFIGS:
                        for name, mutation in cases.MUTATIONS.items():
                            found = run_script(dep, script, refs, {}, tag=config.name,
                                               mutation=mutation)  # fmt: skip
                            result["mutations"].setdefault(name, {})[config.name] = found[:3]
                result["seconds"][config.name] = round(time.monotonic() - t1, 1)
                dist.barrier()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="folder for rank<r>.json")
    ap.add_argument("--configs", nargs="*", default=[], help="configuration names (default all)")
    ap.add_argument("--no-mutations", action="store_true", help="skip the planted bugs")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("SGLANG_FP8_PAGED_MQA_LOGITS_TORCH", "1")
    os.environ.setdefault("SGLANG_DSA_FUSE_TOPK", "0")
    os.environ["CPKV_SHARED_KV"] = "1"
    port = free_port()
    opts = {"configs": args.configs, "mutations": not args.no_mutations}
    import torch.multiprocessing as mp

    mp.start_processes(rank_main, args=(WORLD, port, str(args.out_dir), opts), nprocs=WORLD,
                       start_method="spawn")  # fmt: skip


if __name__ == "__main__":
    main()
