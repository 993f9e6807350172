"""Ranks of the backend-level shared-KV suite: SGLang's DSA attention over cpkv's sharded pool.

``python _skv_backend_worker.py OUT_DIR [--world N] [--cp 4 2] [--device cpu|cuda] [--configs ..]``
starts one process per rank (``torch.multiprocessing``, gloo). For every CP size the first
``cp`` ranks form the CP group (the others wait), and for every configuration of
``_skv_backend_cases.CONFIGS`` deployed at that size each of them runs the scenario through both
sides (cpkv's pool and the replicated one, ``_skv_backend_rank``; a fused top-k deployment is
also held to the rows its torch top-k sibling read), then at CP 2 every planted bug of
``MUTATIONS`` under ``MUTATION_CONFIGS`` and of ``PATH_MUTATIONS`` under its configurations.
Each rank writes ``OUT_DIR/rank<r>.json``.

Environment (set by the caller, before SGLang is imported): ``CPKV_SHARED_KV=1`` (the plugin
installs the shared-KV hooks); on a CPU also ``TRITON_INTERPRET=1`` (SGLang's Triton kernels in
Triton's interpreter) and ``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1`` (SGLang's torch MQA logits).
``SGLANG_DSA_FUSE_TOPK`` is set per deployment (``Config.fused_topk``). ``--device cuda`` puts
every rank on GPU 0 (one GPU cannot host two NCCL ranks, so the ranks talk over gloo), with
SGLang's real kernels and DeepGEMM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from _gloo_rank import free_port, gloo_rank

sys.path.insert(0, str(Path(__file__).parent))

FIXTURE = str(Path(__file__).parent / "fixtures" / "glm51_fp8")
SM90 = (9, 0)


def run_scenario(dep, scenario, result, refs: dict, *, tag: str, mutation=None,
                 draft_only: bool = False) -> list[str]:  # fmt: skip
    """The scenario on fresh pools; returns the differences found.

    The replica side runs only when ``refs`` has no record of a forward yet (the clean run fills
    it; a mutated run, which changes only cpkv's code, compares against the same records).
    ``draft_only``: the mutation is planted in EAGLE's draft forwards alone.
    """
    import _skv_backend_rank as rank_mod
    from _skv_backend_model import Cache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    r2t = ReqToTokenPool(size=rank_mod.MAX_REQUESTS, max_context_len=4096, device=dep.device,
                         enable_memory_saver=False)  # fmt: skip
    cache = Cache(dep.cp, *r2t.req_to_token.shape)
    sides = dep.build(r2t, replica=not refs)
    result["classes"] = [type(s.pool).__qualname__ for s in sides.values()]
    bad: list[str] = []
    topk = dep.config.index_topk
    for k, extends in enumerate(scenario.steps):
        rows = cache.step(extends)
        r2t.req_to_token.copy_(cache.req_to_token.to(dep.device))
        later = {e.name for step in scenario.steps[k + 1 :] for e in step}
        chunked = next((r.req.name for r in rows if r.req.name in later), None)
        for draft in (False, True) if k in scenario.draft else (False,):
            what = f"{tag} step {k}{' draft' if draft else ''}"
            if (k, draft) not in refs:
                refs[(k, draft)] = rank_mod.run_forward(dep, sides["replica"], rows, r2t,
                                                        dep.calls, draft=draft,
                                                        chunked=chunked)  # fmt: skip
            ref = refs[(k, draft)]
            planted = mutation is not None and (draft or not draft_only)
            kernels = dict(dep.calls.topk.calls)
            try:
                with mutation() if planted else contextlib.nullcontext():
                    ours = rank_mod.run_forward(dep, sides["cpkv"], rows, r2t, dep.calls,
                                                draft=draft, chunked=chunked)  # fmt: skip
            except Exception as exc:
                if mutation is None:
                    raise
                bad.append(f"{what}: {type(exc).__name__}: {str(exc)[:160]}")  # loud failure
                every_rank_caught(dep, True)  # raised on every rank alike (plan checks)
                return bad
            found = rank_mod.compare(ours, ref, topk)
            bad += [f"{what}: {f}" for f in found]
            if mutation is not None and every_rank_caught(dep, bool(bad)):
                return bad  # caught on every rank: the rest of the scenario adds nothing
            if mutation is None:
                result["runs"].append({
                    "tag": what, "method": ours.method, "impl": ours.impl,
                    "kv_read": ours.kv_read, "topk_is_slots": ours.topk_is_slots,
                    "topk_below_every_seq": topk < min(r.seq for r in rows),
                    "rows": len(ours.rows), "requests": len(rows),
                    "rank_misses_a_request": len({r.req.name for r, _ in ours.rows}) < len(rows),
                    "prefix": any(r.prefix for r in rows),
                    "reads": sum(len(x) for lay in ours.layers for x in lay.reads),
                    "lookups": ours.lookups,
                    "fed_reads": sum(t is not None for lay in ours.layers for row in lay.feeds
                                     for _, t in row),
                    "topk_kernels": {name: n - kernels.get(name, 0)
                                     for name, n in dep.calls.topk.calls.items()
                                     if n > kernels.get(name, 0)},
                    "ok": not found,
                })  # fmt: skip
        cache.commit(rows)
    return bad


def same_rows(fused: dict, unfused: dict) -> dict:
    """Whether a deployment with SGLang's fused top-k read, per forward, layer and query row, the
    same KV rows as the same deployment with its torch top-k (replica records of one scenario):
    the fused kernels' page and offset transforms land where the unfused ones do."""
    out: dict = {"forwards": 0, "differ": []}
    for (k, draft), rec in sorted(fused.items()):
        other = unfused.get((k, draft))
        if other is None:
            continue
        out["forwards"] += 1
        for a, b in zip(rec.layers, other.layers, strict=True):
            if a.reads != b.reads:
                out["differ"].append(f"step {k}{' draft' if draft else ''} layer {a.layer}")
    return out


def every_rank_caught(dep, caught: bool) -> bool:
    """Whether every rank of the CP group has caught the planted bug: the ranks of a mutated
    run stop together (a rank stopping alone would leave the others in a collective)."""
    flag = torch.tensor([int(caught)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=dep.group.cpu_group)
    return bool(flag.item())


def planted_bugs(config: str, opts: dict) -> list[tuple[str, str]]:
    """``(mutation, scope)`` to run under ``config`` at CP 2: every mutation of ``MUTATIONS``
    under ``MUTATION_CONFIGS`` (or ``--mutation-configs``), scope ``all``, then those of
    ``PATH_MUTATIONS`` that name ``config``."""
    import _skv_backend_cases as cases

    under = opts["mutation_configs"] or cases.MUTATION_CONFIGS
    out = [(name, "all") for name in cases.MUTATIONS if config in under]
    return out + [(name, scope) for name, where in cases.PATH_MUTATIONS.items()
                  for c, scope in where if c == config]  # fmt: skip


def check_inverse_bound(dep) -> dict:
    """A pool built for ``max_running_requests = 4``: a batch of 4 requests runs and agrees with
    the replica; a batch of 5 is refused before any layer, naming the bound."""
    import _skv_backend_rank as rank_mod
    from _skv_backend_model import Cache, Extend
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang_cpkv.plugin.shared_kv import ScratchCapacityError

    r2t = ReqToTokenPool(size=rank_mod.MAX_REQUESTS, max_context_len=4096, device=dep.device,
                         enable_memory_saver=False)  # fmt: skip
    cache = Cache(dep.cp, *r2t.req_to_token.shape)
    sides = dep.build(r2t, max_requests=4)
    out = {"at_bound": None, "past_bound": None}
    for n, key in ((4, "at_bound"), (5, "past_bound")):
        rows = cache.step([Extend(f"bound{n}_{i}", 3 + i) for i in range(n)])
        r2t.req_to_token.copy_(cache.req_to_token.to(dep.device))
        try:
            ref = rank_mod.run_forward(dep, sides["replica"], rows, r2t, dep.calls, draft=False)
            ours = rank_mod.run_forward(dep, sides["cpkv"], rows, r2t, dep.calls, draft=False)
            out[key] = rank_mod.compare(ours, ref, dep.config.index_topk) or "ok"
        except ScratchCapacityError as exc:
            out[key] = f"refused: {exc}"
        cache.commit(rows)
    return out


@contextlib.contextmanager
def configuration(result: dict, tag: str) -> Iterator[None]:
    """Run one configuration's block; an exception in it is recorded as that configuration's
    error (``result["config_errors"][tag]``, its last line; the summary lists it by name) and
    then ends the rank's loop, as before. Going on to the next configuration would be safe only
    when every rank of the group failed at the same point (as FlashMLA's shape check did on an
    H100): a rank that failed alone would pair its next configuration's collectives with a peer
    still waiting inside the failed one. Ending the rank closes its gloo connections, so the
    peer's pending collective fails at once instead of waiting out the group's timeout."""
    try:
        yield
    except Exception:
        # its last line: gloo_rank keeps the whole traceback in result["error"]
        result.setdefault("config_errors", {})[tag] = (
            traceback.format_exc().strip().splitlines()[-1]
        )
        raise


def rank_main(rank: int, world: int, port: int, out_dir: str, opts: dict) -> None:
    if os.environ.get("CPKV_PROFILE") and rank == 0:
        import cProfile

        cProfile.runctx(
            "_rank_main(rank, world, port, out_dir, opts)",
            globals(),
            locals(),
            os.path.join(out_dir, "rank0.prof"),
        )
        return
    _rank_main(rank, world, port, out_dir, opts)


def _rank_main(rank: int, world: int, port: int, out_dir: str, opts: dict) -> None:
    torch.set_num_threads(1)
    result: dict = {"rank": rank, "error": None, "failures": [], "runs": [], "mutations": {},
                    "originals_replaced": None, "seconds": {}, "fused_vs_torch": {},
                    "config_errors": {}}  # fmt: skip
    device = torch.device("cuda", 0) if opts["device"] == "cuda" else torch.device("cpu")
    t0 = time.monotonic()
    with gloo_rank(rank, world, port, out_dir, result, timeout_s=900):
        if device.type == "cuda":
            torch.cuda.set_device(device)
        import _skv_backend_stand_ins as stand_ins

        result["stubbed"] = stand_ins.stub_missing_packages() if device.type == "cuda" else []
        import _skv_backend_cases as cases
        import pytest
        from _skv_dist_worker import _coordinator
        from sglang_cpkv.plugin.entry import activate

        hooks = activate()
        result["hooks"] = list(hooks)
        result["seconds"]["start"] = round(time.monotonic() - t0, 1)
        local_rank = 0 if device.type == "cuda" else rank  # every rank on GPU 0 under cuda
        groups = {
            cp: _coordinator([list(range(i, i + cp)) for i in range(0, world, cp)], rank, "gloo",
                             f"cpkv_backend_cp{cp}", local_rank=local_rank)
            for cp in opts["cps"]
        }  # fmt: skip
        configs = [
            cases.on_device(c, device.type)
            for c in cases.CONFIGS
            if not opts["configs"] or c.name in opts["configs"]
        ]
        result["index_topk"] = {c.name: c.index_topk for c in configs}
        replicas: dict[str, dict] = {}  # the replica's records per deployment, for same_rows
        with pytest.MonkeyPatch.context() as mp, stand_ins.installed(mp, device) as calls:
            result["originals_replaced"] = stand_ins.check_originals()
            for cp in opts["cps"]:
                t1 = time.monotonic()
                if rank < cp:
                    for config in [c for c in configs if cp in c.cps]:
                        tag, refs = f"cp{cp} {config.name}", {}
                        with configuration(result, tag):
                            run_deployment(config, cp, rank, groups[cp], device, calls, result,
                                           tag, refs, replicas, configs, opts)  # fmt: skip
                result["seconds"][f"cp{cp}"] = round(time.monotonic() - t1, 1)
                dist.barrier()


def run_deployment(config, cp: int, rank: int, group, device, calls, result: dict, tag: str,
                   refs: dict, replicas: dict, configs: list, opts: dict) -> None:  # fmt: skip
    """One configuration at one CP size on this rank: the scenario on both sides, the fused
    top-k's rows against its torch sibling's, the inverse bound (CP 2, first configuration) and
    the planted bugs (CP 2)."""
    import _skv_backend_cases as cases
    import _skv_backend_rank as rank_mod

    dep = rank_mod.Deployment(config, cp, rank, group, device, FIXTURE, SM90)
    dep.calls = calls
    with dep.context():
        result["failures"] += run_scenario(dep, cases.SCENARIO, result, refs, tag=tag)
        replicas[tag] = refs
        torch_tag = tag.removesuffix("+fused")
        if config.fused_topk and torch_tag in replicas:
            result["fused_vs_torch"][tag] = same_rows(refs, replicas[torch_tag])
        if cp == 2 and config == configs[0]:
            result["inverse_bound"] = check_inverse_bound(dep)
        if cp == 2 and opts["mutations"]:
            for name, scope in planted_bugs(config.name, opts):
                found = run_scenario(
                    dep, cases.SCENARIO, {}, refs, tag=f"{tag} {name}",
                    mutation=cases.ALL_MUTATIONS[name], draft_only=scope == "draft",
                )  # fmt: skip
                key = config.name + (" draft" if scope == "draft" else "")
                result["mutations"].setdefault(name, {})[key] = found[:3]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="folder for rank<r>.json")
    ap.add_argument("--world", type=int, default=4, help="ranks (processes)")
    ap.add_argument("--cp", type=int, nargs="+", default=[4, 2], help="CP sizes, each <= world")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--configs", nargs="*", default=[], help="configuration names (default all)")
    ap.add_argument("--no-mutations", action="store_true", help="skip the planted bugs")
    ap.add_argument(
        "--mutation-configs",
        nargs="*",
        default=None,
        help="configurations the planted bugs run under (default: the cases')",
    )
    args = ap.parse_args(argv)
    if any(cp < 2 or cp > args.world for cp in args.cp):
        ap.error(f"--cp {args.cp}: each CP size must be in 2..--world ({args.world})")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("SGLANG_FP8_PAGED_MQA_LOGITS_TORCH", "1")
    else:  # the gather scratch in NCCL symmetric memory needs NCCL ranks; ours talk over gloo
        os.environ.setdefault("SGLANG_ENABLE_KV_SHARD_ZERO_SM_GATHER", "0")
    os.environ["CPKV_SHARED_KV"] = "1"
    port = free_port()
    opts = {
        "cps": args.cp,
        "device": args.device,
        "configs": args.configs,
        "mutations": not args.no_mutations,
        "mutation_configs": args.mutation_configs,
    }
    import torch.multiprocessing as mp

    mp.start_processes(rank_main, args=(args.world, port, str(args.out_dir), opts),
                       nprocs=args.world, start_method="spawn")  # fmt: skip
    write_summary(args.out_dir, args.device)


def write_summary(out_dir: Path, device: str) -> dict:
    """``summary.json`` and ``summary.md``: per CP size and configuration, what ran and agreed,
    the planted bugs caught, what stood in, and where it ran (benchkit's environment fields)."""
    import _skv_backend_stand_ins as stand_ins

    ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("rank*.json"))]
    try:
        from benchkit import capture_env

        env = capture_env(
            device="cuda" if device == "cuda" else "cpu", package="sglang-integration"
        )
    except ImportError:  # benchkit is dev-only; the record still says what ran
        env = {"torch": torch.__version__}
    rows: dict[str, dict] = {}
    for r in ranks:
        for run in r["runs"]:
            cp, config = run["tag"].split()[:2]
            row = rows.setdefault(
                f"{cp} {config}",
                {"ranks": set(), "forwards": 0, "ok": 0, "rows": 0, "reads": 0, "methods": set(),
                 "kv_read": set()},
            )  # fmt: skip
            row["kv_read"].add(run.get("kv_read", ""))
            row["ranks"].add(r["rank"])
            row["forwards"] += 1
            row["ok"] += run["ok"]
            row["rows"] += run["rows"]
            row["reads"] += run["reads"]
            row["methods"].add(run["method"])
    for row in rows.values():
        row["ranks"], row["methods"] = sorted(row["ranks"]), sorted(row["methods"])
        row["kv_read"] = sorted(row["kv_read"])
    where = "cpu" if device == "cpu" else "gpu"
    fused: dict[str, dict] = {}  # over the ranks: forwards compared, differences
    caught: dict[str, dict[str, bool]] = {}  # a planted bug is caught when some rank caught it
    for r in ranks:
        for k, v in r.get("fused_vs_torch", {}).items():
            agg = fused.setdefault(k, {"forwards": 0, "differ": []})
            agg["forwards"] += v["forwards"]
            agg["differ"] += [f"rank {r['rank']} {d}" for d in v["differ"]]
        for name, by in r["mutations"].items():
            for config, found in by.items():
                caught.setdefault(name, {})[config] = caught.get(name, {}).get(config, False) or (
                    bool(found)
                )
    summary = {
        "device": device, "env": env, "errors": [r["error"] for r in ranks if r["error"]],
        "config_errors": {f"rank {r['rank']} {tag}": text.strip().splitlines()[-1]
                          for r in ranks for tag, text in r.get("config_errors", {}).items()},
        "failures": sum(len(r["failures"]) for r in ranks), "cases": rows,
        "mutations": caught,
        "inverse_bound": ranks[0].get("inverse_bound") if ranks else None,
        "fused_vs_torch": fused,
        "stand_ins": [x[0] for x in stand_ins.REPLACEMENTS if x[3] in (where, "both")],
        "stubbed_modules": sorted({m for r in ranks for m in r.get("stubbed", [])}),
        "seconds": [r["seconds"] for r in ranks],
    }  # fmt: skip
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    def stopped(case: str) -> str:  # a configuration that failed part-way shows it in its row
        failed = any(tag == case for r in ranks for tag in r.get("config_errors", {}))
        return ", then an error" if failed else ""

    lines = [
        f"# shared KV through SGLang's DSA backend ({device})", "",
        f"{env.get('timestamp', '')} | {env.get('gpu_name') or env.get('cpu', '')} | "
        f"torch {env.get('torch')} | triton {env.get('triton')} | `{env.get('command', '')}`", "",
        "| case | ranks | forwards agreeing | query rows compared | KV rows read | top-k | "
        "rows the attention kernel read |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(f"| {k} | {v['ranks']} | {v['ok']}/{v['forwards']}{stopped(k)} | {v['rows']:,} | "
          f"{v['reads']:,} | {', '.join(v['methods'])} | {', '.join(v['kv_read'])} |"
          for k, v in rows.items()),
        "", f"errors: {len(summary['errors'])}; differences: {summary['failures']}",
        *(f"- {k}: {v}" for k, v in summary["config_errors"].items()),
        "fused top-k read the rows of the torch top-k (forwards compared, all ranks): "
        + (", ".join(f"{k}: {v['forwards']}{' DIFFER ' + str(v['differ']) if v['differ'] else ''}"
                     for k, v in summary["fused_vs_torch"].items()) or "none compared"),
        f"planted bugs caught: {summary['mutations'] or 'none run'}",
        f"inverse bound (4 requests): {summary['inverse_bound']}",
        "", "stood in:", *(f"- {x}" for x in summary["stand_ins"]),
    ]  # fmt: skip
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
    return summary


if __name__ == "__main__":
    main()
