"""Rank body of the shared-KV pool tests: SGLang's real sharded DSA pools over a process group.

``python _skv_dist_worker.py OUT_DIR [--world N] [--backend gloo|nccl] [--cases ...]`` starts one
process per rank (``torch.multiprocessing``). Every CP size of ``--cp`` (default: the world, then
halves down to 2) runs on consecutive blocks of ranks; the ranks of the first block check.
``CPKV_SHARED_KV=1`` must be set (the plugin then installs cpkv's pool class).

Real: ``torch.distributed``, SGLang's ``GroupCoordinator``, both pool classes (upstream
``PageInterleaveDSATokenToKVPool`` and cpkv's subclass installed by the plugin through
``HookRegistry``), SGLang's ``ForwardBatch``, ``prepare_kv_shard_forward`` (hooked), the Triton
store kernels, and an unsharded ``DSATokenToKVPool`` as the full-replica reference.

- ``--backend nccl`` (CUDA, one GPU per rank): nothing is replaced. The pools gather through
  SGLang's own communicator, ``PyNcclCommunicator`` over the shard group (it loads the NCCL
  library torch ships through ctypes; no sgl-kernel), on the pool's side CUDA stream. SGLang
  builds one pool per process, the checks one per case: pools of one shard group share one
  real communicator (:func:`one_communicator_per_group`) instead of one NCCL communicator each.
- ``--backend gloo`` (CPU, ``TRITON_INTERPRET=1`` so SGLang's Triton kernels run on CPU tensors)
  replaces what needs CUDA/NCCL:

  1. ``page_interleave_pool.PyNcclCommunicator`` -> ``_skv_backend_stand_ins.GlooCommunicator``
     (same ``all_gather`` and ``change_state`` interface over the shard group's gloo
     ``cpu_group``);
  2. SGLang's fp8 quantizing store kernel (``dsa_quant_k_cache._quantize_k_cache_fast_kernel``)
     -> the torch stand-in of ``_dsa_stand_ins`` (per-128 amax scale, e4m3 cast, RoPE copied;
     SGLang's wrapper and byte layout stay). Under Triton's interpreter the kernel writes other
     fp8 bytes than torch's e4m3 cast, and it took nine tenths of this run (one interpreted
     program per token and 128 columns); the checks compare the bytes the pools move, written
     by one quantizer for both pools and the replica, so its numerics do not enter them;
  3. nothing else: the pools' side stream is ``torch.cpu.Stream`` (SGLang picks it for a CPU
     pool), whose events and waits are no-ops; SGLang's bf16 store kernel runs in the
     interpreter.

Cases: ``table`` is ``_skv_shapes.SHAPES`` (plus the forced foreign page); ``scenarios`` is
every cpkv-validate scenario as SGLang batches it (``_skv_scenarios``). Each rank writes
``<OUT_DIR>/rank<r>.json``: the checks it ran and every mismatch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from _gloo_rank import free_port
from _skv_backend_stand_ins import GlooCommunicator
from _skv_sglang_rows import sglang_kept_rows
from _skv_shapes import SHAPES, Batch, P, forced_foreign_page, place

LAYERS = 2  # layer 1 shares its top-k (no indexer keys): the skip path runs too
LORA, ROPE = 512, 64
DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
#: every shape runs with bf16; packed fp8 (SGLang's quantising store, slow under the Triton
#: interpreter) on the shapes that stress partial pages, chunk continuations and fresh batches.
FP8_SHAPES = ("prefix_lengths", "chunked_continuation_hit", "fresh_1_1_300", "single_request")
#: where this process's pools and tensors live (set once per rank by :func:`rank_main`)
DEVICE = torch.device("cpu")


@dataclass(frozen=True)
class Options:
    """What one run checks (the same on every rank).

    Attributes:
        backend: ``gloo`` (CPU) or ``nccl`` (one CUDA device per rank).
        cps: CP sizes, each dividing the world size; the first block of ranks checks each.
        cases: ``table`` (``SHAPES`` and the forced foreign page) and/or ``scenarios``.
        only: case names to run (None: all); scenario steps match by ``<scenario>/`` prefix too.
        fp8: ``subset`` (packed fp8 on ``FP8_SHAPES`` only: slow under the Triton interpreter)
            or ``all``.
    """

    backend: str = "gloo"
    cps: tuple[int, ...] = (4, 2)
    cases: tuple[str, ...] = ("table",)
    only: tuple[str, ...] | None = None
    fp8: str = "subset"


def one_communicator_per_group(cls):
    """``cls`` (SGLang's ``PyNcclCommunicator``), built once per (group, device, options)."""
    made: dict[tuple, object] = {}

    def build(group, device, **options):
        key = (id(group), str(device), tuple(sorted(options.items())))
        if key not in made:
            made[key] = cls(group=group, device=device, **options)
        return made[key]

    return build


def _coordinator(groups, rank, backend: str, name: str, local_rank: int | None = None):
    """SGLang's coordinator of one CP group (a gloo ``cpu_group`` beside the device group);
    ``local_rank`` names the device (default: the rank's own)."""
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    return GroupCoordinator(
        group_ranks=groups, local_rank=rank if local_rank is None else local_rank,
        torch_distributed_backend=backend,
        use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False,
        use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
        use_xpu_communicator=False, group_name=name,
    )  # fmt: skip


def _kv(loc: torch.Tensor, tag: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(nope, rope) bf16 rows for logical locations: distinct per location and ``tag``."""
    base = loc.double().unsqueeze(1) * 0.25 + tag
    row = (base + torch.arange(LORA + ROPE, device=loc.device).double() / 4096).float()
    row = torch.remainder(row, 300.0) - 150.0  # stays inside fp8's range
    row = row.bfloat16()
    return row[:, None, :LORA].contiguous(), row[:, None, LORA:].contiguous()


def _index_k(loc: torch.Tensor, tag: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = ((loc.unsqueeze(1) * 7 + torch.arange(128, device=loc.device) + tag) % 113).to(torch.uint8)
    scale = (loc.float() + 1 + tag).unsqueeze(1)
    return k.view(torch.float8_e4m3fn), scale


def _pool(cls, batch: Batch, group, dtype, size_pages: int, gather_pages: int, write_pages: int):
    from sglang.srt.mem_cache.page_interleave import PageShardSpec

    n = batch.shard_size
    span = n * P
    spec = PageShardSpec(
        shard_rank=group.rank_in_group, shard_size=n, page_size=P,
        max_prefix_tokens=-(-gather_pages * P // span) * span, chunk_tokens=write_pages * P,
    )  # fmt: skip
    return cls(
        size_pages * P, page_size=P, kv_lora_rank=LORA, dtype=dtype, qk_rope_head_dim=ROPE,
        layer_num=LAYERS, device=DEVICE, index_head_dim=128, enable_memory_saver=False,
        kv_cache_dim=LORA + ROPE if dtype == torch.bfloat16 else 656, start_layer=0,
        end_layer=LAYERS - 1, skip_topk_layers=[False, True], shard_spec=spec, shard_group=group,
    )  # fmt: skip


def _replica(num_pages: int, dtype):
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    return DSATokenToKVPool(
        num_pages * P, page_size=P, kv_lora_rank=LORA, dtype=dtype, qk_rope_head_dim=ROPE,
        layer_num=LAYERS, device=DEVICE, index_head_dim=128, enable_memory_saver=False,
        kv_cache_dim=LORA + ROPE if dtype == torch.bfloat16 else 656, start_layer=0,
        end_layer=LAYERS - 1, skip_topk_layers=[False, True],
    )  # fmt: skip


def _forward_batch(batch: Batch, out_cache_loc: torch.Tensor):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    dev = DEVICE
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(batch.pages),
        input_ids=torch.zeros(batch.num_tokens, dtype=torch.long, device=dev),
        req_pool_indices=torch.arange(len(batch.pages), device=dev),
        seq_lens=torch.tensor(batch.seq, device=dev), out_cache_loc=out_cache_loc,
        seq_lens_sum=sum(batch.seq),
    )  # fmt: skip
    fb.seq_lens_cpu = torch.tensor(batch.seq)
    fb.extend_prefix_lens_cpu = list(batch.prefix)
    fb.extend_seq_lens_cpu = list(batch.extend)
    fb.extend_seq_lens = torch.tensor(batch.extend, device=dev)
    fb.extend_prefix_lens = torch.tensor(batch.prefix, device=dev)
    return fb


def _write(pool, loc: torch.Tensor, tag: float) -> None:
    for layer_id in range(LAYERS):
        nope, rope = _kv(loc, tag + layer_id)
        pool.set_mla_kv_buffer(SimpleNamespace(layer_id=layer_id), loc, nope, rope)
        if layer_id == 0:
            k, s = _index_k(loc, int(tag))
            pool.set_index_k_scale_buffer(layer_id, loc, k, s)


def _history_locs(batch: Batch) -> torch.Tensor:
    """Every location that holds history for some request (what earlier forwards wrote)."""
    locs = {
        batch.pages[b][i // P] * P + i % P
        for b in range(len(batch.pages))
        for i in range(batch.prefix[b])
    }
    return torch.tensor(sorted(locs), dtype=torch.long, device=DEVICE)


def _setup_history(pool, batch: Batch) -> None:
    """Write the history through the pool's own sharded write path (a prefill of its pages)."""
    locs = _history_locs(batch)
    if locs.numel() == 0:
        return
    pages = sorted({int(x) // P for x in locs})
    r2t = torch.zeros(1, len(pages) * P, dtype=torch.int32, device=DEVICE)
    for j, page in enumerate(pages):
        r2t[0, j * P : (j + 1) * P] = torch.arange(page * P, (page + 1) * P, device=DEVICE)
    pool.begin_shard_extend(r2t, torch.tensor([0], device=DEVICE), [0], [len(pages) * P])
    full = r2t[0].long()
    for layer_id in range(LAYERS):  # whole pages: rows past the history are never read
        nope, rope = _kv(full, 1000.0 + layer_id)
        pool.set_mla_kv_buffer(SimpleNamespace(layer_id=layer_id), full, nope, rope)
        if layer_id == 0:
            k, s = _index_k(full, 1000)
            pool.set_index_k_scale_buffer(layer_id, full, k, s)
    pool.end_shard_extend()


def _reads(pool, batch: Batch, rows: list[int], layer_id: int):
    """(latent bytes, indexer k, indexer scale) each request of ``rows`` reads, per position."""
    r2t = batch.req_to_token().to(DEVICE)
    width = max(batch.seq[b] for b in rows)
    table = r2t[rows, :width]
    kv = pool.get_key_buffer(layer_id)
    scratch = pool.translate_loc_to_scratch(table)
    latent = kv.view(kv.shape[0], -1).view(torch.uint8)[scratch.long()]
    index = None
    if layer_id == 0:
        seq = torch.tensor([batch.seq[b] for b in rows], device=DEVICE)
        k, s = pool.get_index_k_scale_buffer(
            layer_id, seq, table[:, ::P] // P, int(seq.sum()), int(seq.max())
        )
        index = (k, s)
    return latent, index


def _replica_reads(before, after, batch: Batch, rows: list[int], layer_id: int):
    """What a full-replica pool gives each request: history rows as they were before this
    forward, current rows as written by the forward (each position once, by its request)."""
    out = []
    for b in rows:
        loc = torch.tensor(
            [batch.pages[b][i // P] * P + i % P for i in range(batch.seq[b])], device=DEVICE
        )
        hist = torch.arange(batch.seq[b], device=DEVICE) < batch.prefix[b]
        rows_b = []
        for pool in (before, after):
            kv = pool.kv_buffer[layer_id]
            rows_b.append(kv.view(kv.shape[0], -1).view(torch.uint8)[loc])
        latent = torch.where(hist.unsqueeze(1), rows_b[0], rows_b[1])
        index = None
        if layer_id == 0:
            ks = []
            for pool in (before, after):
                k, s = pool.get_index_k_scale_buffer(
                    0, torch.tensor([batch.seq[b]], device=DEVICE), loc[::P].unsqueeze(0) // P,
                    batch.seq[b], batch.seq[b],
                )  # fmt: skip
                ks.append((k, s))
            index = tuple(torch.where(hist.unsqueeze(1), ks[0][i], ks[1][i]) for i in range(2))
        out.append((latent, index))
    return out


def _copy_replica(src, num_pages, dtype):
    dst = _replica(num_pages, dtype)
    for a, b in zip(dst.kv_buffer, src.kv_buffer, strict=True):
        a.copy_(b)
    for a, b in zip(dst.index_key_cache.buffer, src.index_key_cache.buffer, strict=True):
        a.copy_(b)
    return dst


def _sglang_rows(pool, fb) -> list[int]:
    """The requests whose rows SGLang's DSA backend keeps in this forward's tables
    (``init_forward_metadata``: ``page_table[bs_idx]`` when ``can_dsa_prefill_cp_interleave``
    holds, every request otherwise), from SGLang's own split on this rank of the shard group."""
    from sglang.srt.layers.attention.dsa.utils import can_dsa_prefill_cp_interleave

    if not can_dsa_prefill_cp_interleave(fb):
        return list(range(fb.batch_size))
    return sglang_kept_rows(fb.extend_seq_lens_cpu, pool.shard_size, pool.shard_rank)


def _run_forward(pool, batch: Batch, oc: torch.Tensor, failures: list[str], what: str):
    """The extend forward as SGLang's DSA backend drives the pool; returns the rows whose
    tables the backend translates: SGLang's kept requests for cpkv's pool (whose plan must
    hold exactly those, else a failure is recorded), every request for SGLang's."""
    from sglang.srt.layers.attention.kv_shard_hooks import prepare_kv_shard_forward

    fb = _forward_batch(batch, oc)
    assert prepare_kv_shard_forward(pool, batch.req_to_token().to(DEVICE), fb)
    _write(pool, fb.out_cache_loc, 0.0)
    plan = getattr(pool, "cpkv_forward", None)
    if plan is None:
        return [list(range(len(batch.pages)))]
    rows = _sglang_rows(pool, fb)
    if plan.table_req.tolist() != rows:
        failures.append(f"{what}: plan.table_req {plan.table_req.tolist()} != SGLang's {rows}")
    return [rows]


def _compare(name, got, want, failures, what):
    if not torch.equal(got, want):
        bad = (got != want).reshape(got.shape[0], -1).any(1).nonzero().flatten().tolist()
        failures.append(f"{what}: {name} differs at positions {bad[:8]} ({len(bad)} rows)")


def _references(batch: Batch, dtype):
    """Full-replica pools (SGLang's unsharded DSA pool): history only, and after the forward."""
    num_pages = batch.shard_size * (batch.local_pages + 1)
    replica = _replica(num_pages, dtype)
    hist = _history_locs(batch)
    if hist.numel():
        pages = sorted({int(x) // P for x in hist})
        full = torch.cat([torch.arange(p * P, (p + 1) * P, device=DEVICE) for p in pages])
        for layer_id in range(LAYERS):
            nope, rope = _kv(full, 1000.0 + layer_id)
            replica.set_mla_kv_buffer(SimpleNamespace(layer_id=layer_id), full, nope, rope)
        k, s = _index_k(full, 1000)
        replica.set_index_k_scale_buffer(0, full, k, s)
    before = _copy_replica(replica, num_pages, dtype)
    _write(replica, batch.out_cache_loc().to(DEVICE), 0.0)
    return before, replica


def _sizes(batch: Batch) -> tuple[int, int, int]:
    """(local pages per rank, gather pages, write pages) a pool for ``batch`` needs."""
    hist_pages = {int(x) // P for x in _history_locs(batch)}
    gather = batch.shard_size * max(sum(-(-p // P) for p in batch.prefix), 1)
    # the setup prefill writes every history page as a fresh page: room for both
    write = sum(len(w) for w in batch.writers) + len(hist_pages) + 1
    return batch.local_pages + 1, gather, write


def check_shape(tag, batch, group, dtype, cls_ours, cls_upstream, result):
    before, after = _references(batch, dtype)
    oc = batch.out_cache_loc().to(DEVICE)
    aligned = all(p % P == 0 for p in batch.prefix)
    pools = {"cpkv": cls_ours} | ({"sglang": cls_upstream} if aligned else {})
    reads = {}
    for label, cls in pools.items():
        pool = _pool(cls, batch, group, dtype, *_sizes(batch))
        _setup_history(pool, batch)
        row_sets = _run_forward(pool, batch, oc.clone(), result["failures"], f"{tag} {label}")
        if label == "cpkv":  # the requests read (and checked, per layer) on this rank
            result["rows"][tag] = row_sets[0]
        for layer_id in range(LAYERS):
            for rows in row_sets:
                latent, index = _reads(pool, batch, rows, layer_id)
                reads[(label, layer_id, tuple(rows))] = (latent, index)
                want = _replica_reads(before, after, batch, rows, layer_id)
                offset = 0
                for i, b in enumerate(rows):
                    seq = batch.seq[b]
                    what = f"{tag} {label} layer {layer_id} request {b} rows {rows}"
                    if label == "cpkv":
                        result["checks"] += 1
                        _compare("latent", latent[i, :seq], want[i][0], result["failures"], what)
                        if index is not None:
                            for j, part in enumerate(("index k", "index scale")):
                                _compare(part, index[j][offset : offset + seq],
                                         want[i][1][j], result["failures"], what)  # fmt: skip
                    else:  # SGLang's map on SGLang-shaped batches: recorded, not asserted
                        ok = torch.equal(latent[i, :seq], want[i][0])
                        result["upstream"].append([what, ok])
                    offset += seq
    if len(batch.pages) == 1 and "sglang" in pools:  # batch size 1: the two read the same bytes
        for layer_id in range(LAYERS):
            a = reads[("cpkv", layer_id, (0,))]
            b = reads[("sglang", layer_id, (0,))]
            same = torch.equal(a[0], b[0]) and (a[1] is None or torch.equal(a[1][0], b[1][0]))
            result["bs1"].append([f"{tag} layer {layer_id}", same])


def check_forced(tag, batch, group, dtype, cls_ours, cls_upstream, result):
    """Request 1 reads page X as history while request 0 writes it. Recorded per pool: whether
    request 1 reads the full-replica history there, and whether it reads request 0's rows."""
    before, after = _references(batch, dtype)
    want = _replica_reads(before, after, batch, [0, 1], 0)
    for label, cls in (("cpkv", cls_ours), ("sglang", cls_upstream)):
        pool = _pool(cls, batch, group, dtype, *_sizes(batch))
        _setup_history(pool, batch)
        oc = batch.out_cache_loc().to(DEVICE)
        _run_forward(pool, batch, oc, result["failures"], f"{tag} {label} forced")
        latent, _ = _reads(pool, batch, [0, 1], 0)
        on_x = slice(2 * P, 2 * P + 40)  # request 0's current rows; request 1's history
        result["forced"].append(
            {
                "pool": f"{tag} {label}",
                "req1_reads_history": torch.equal(latent[1, : batch.seq[1]], want[1][0]),
                "req0_reads_own": torch.equal(latent[0, : batch.seq[0]], want[0][0]),
                "req1_reads_req0_rows": torch.equal(latent[1, on_x], latent[0, on_x]),
            }
        )


def _batches(options: Options, cp: int) -> dict[str, Batch]:
    """The run's batches at CP ``cp``: the table (by ``SHAPES`` name) and the scenario steps."""
    from _skv_scenarios import scenario_batches

    out: dict[str, Batch] = {}
    if "table" in options.cases:
        out |= {name: place(name, reqs, cp) for name, reqs in SHAPES.items()}
    if "scenarios" in options.cases:
        out |= scenario_batches(None, cp)
    if options.only is not None:
        out = {n: b for n, b in out.items() if n in options.only or n.split("/")[0] in options.only}
    return out


def _wants_fp8(options: Options, name: str) -> bool:
    return options.fp8 == "all" or name in FP8_SHAPES


def _setup_rank(rank: int, world: int, port: int, options: Options):
    """Init the process group and SGLang's deployment; the pool classes (cpkv's, upstream's)."""
    global DEVICE
    backend = options.backend
    if backend == "nccl":
        torch.cuda.set_device(rank)
        DEVICE = torch.device("cuda", rank)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=600),
        **({"device_id": DEVICE} if backend == "nccl" else {}),
    )  # fmt: skip
    from sglang.srt.mem_cache import page_interleave_pool as pip
    from sglang.srt.runtime_context import publish

    # A DSA model with interleave prefill CP, resolved by SGLang for an emulated H200 the way
    # `cpkv-serve --dry-run --gpu sm90` does (its CP helpers read this at run time). The
    # plugin is active from here on (class REPLACE + plan hook, via load_plugins()).
    from sglang_cpkv.serve._dry_run import emulated_gpu, resolve

    fixture = str(Path(__file__).parent / "fixtures" / "glm51_fp8")
    argv = ["--model-path", fixture, "--tp", str(world), "--enable-prefill-cp",
            "--attn-cp-size", str(world), "--cp-strategy", "interleave"]  # fmt: skip
    with emulated_gpu((9, 0)):
        publish(resolve(argv, (9, 0)), role="scheduler")
    if backend == "gloo":
        import sglang.kernels.ops.quantization.dsa_quant_k_cache as quant
        from _dsa_stand_ins import fp8_quantizer

        pip.PyNcclCommunicator = GlooCommunicator  # replacement 1 (see module docstring)
        quant._quantize_k_cache_fast_kernel = fp8_quantizer()  # replacement 2
    else:
        pip.PyNcclCommunicator = one_communicator_per_group(pip.PyNcclCommunicator)
    ours = pip.PageInterleaveDSATokenToKVPool
    assert getattr(ours, "cpkv_shared_kv", False), ours
    return ours, ours.__mro__[1]


def _device_info() -> dict[str, object]:
    info: dict[str, object] = {"device": str(DEVICE), "torch": torch.__version__}
    if DEVICE.type == "cuda":
        info["gpu_name"] = torch.cuda.get_device_name(DEVICE)
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return info


def rank_main(rank: int, world: int, port: int, out_dir: str, options: Options) -> None:
    torch.set_num_threads(1)
    result = {
        "checks": 0, "failures": [], "upstream": [], "bs1": [], "forced": [], "covered": [],
        "rows": {},
        "error": None, "world": world, "options": asdict(options),
    }  # fmt: skip
    try:
        ours, upstream = _setup_rank(rank, world, port, options)
        result |= _device_info()
        result["classes"] = [ours.__qualname__, upstream.__qualname__]
        groups = {  # created on every rank up front: group creation is collective
            cp: _coordinator([list(range(i, i + cp)) for i in range(0, world, cp)], rank,
                             options.backend, f"cpkv_test_cp{cp}")
            for cp in options.cps
        }  # fmt: skip
        for cp, group in groups.items():
            if rank >= cp:  # the other blocks would repeat the first one's checks
                continue
            batches = _batches(options, cp)
            for dname, dtype in DTYPES.items():
                for name, batch in batches.items():
                    if dname == "fp8" and not _wants_fp8(options, name):
                        continue
                    tag = f"cp{cp} {dname} {name}"
                    check_shape(tag, batch, group, dtype, ours, upstream, result)
                    result["covered"].append(tag)
                    if "communicator" not in result:
                        result["communicator"] = _communicator_name(ours, batch, group, dtype)
                if "table" in options.cases and options.only is None:
                    batch = forced_foreign_page(cp)
                    check_forced(f"cp{cp} {dname}", batch, group, dtype, ours, upstream, result)
        dist.barrier()
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            dist.destroy_process_group()


def _communicator_name(cls, batch: Batch, group, dtype) -> str:
    """The class the pool gathers through (SGLang's ``PyNcclCommunicator`` on CUDA: the
    instance is the real class's, ``one_communicator_per_group`` only reuses it)."""
    pool = _pool(cls, batch, group, dtype, *_sizes(batch))
    return type(pool.kv_gather_comm).__qualname__


def parse_args(argv: list[str] | None) -> tuple[Path, int, Options]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="folder for rank<r>.json")
    ap.add_argument("--world", type=int, default=4, help="ranks (one GPU each under nccl)")
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--cp", type=int, nargs="+", help="CP sizes (default: world, halves to 2)")
    ap.add_argument("--cases", nargs="+", choices=["table", "scenarios"], default=["table"])
    ap.add_argument("--only", nargs="+", help="case names (a scenario name takes all its steps)")
    ap.add_argument("--fp8", choices=["subset", "all"], default="subset")
    args = ap.parse_args(argv)
    cps = args.cp or [c for c in (args.world >> k for k in range(8)) if c >= 2]
    for cp in cps:
        if cp < 1 or args.world % cp:
            ap.error(f"--cp {cp} must divide --world {args.world}; pick CP sizes that divide it")
    if args.backend == "nccl" and torch.cuda.device_count() < args.world:
        found = torch.cuda.device_count()
        ap.error(f"--world {args.world} under nccl needs {args.world} CUDA devices, found "
                 f"{found}; lower --world or use --backend gloo")  # fmt: skip
    only = tuple(args.only) if args.only else None
    options = Options(args.backend, tuple(cps), tuple(args.cases), only, args.fp8)
    return args.out_dir, args.world, options


def main(argv: list[str] | None = None) -> None:
    out_dir, world, options = parse_args(argv)
    out_dir.mkdir(parents=True, exist_ok=True)
    if options.backend == "nccl":  # NVLink multicast off (SGLang's and torch's)
        for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
            os.environ.setdefault(var, "0" if var == "NCCL_NVLS_ENABLE" else "1")
    port = free_port()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["torch", "sglang.srt.mem_cache.page_interleave_pool", "sglang.srt.mem_cache.memory_pool"]
    )
    import torch.multiprocessing as mp

    mp.start_processes(
        rank_main, args=(world, port, str(out_dir), options), nprocs=world,
        start_method="forkserver",
    )  # fmt: skip


if __name__ == "__main__":
    main()
