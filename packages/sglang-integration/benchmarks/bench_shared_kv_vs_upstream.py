"""Shared KV against SGLang's own sharded pool and the replicated pool, through SGLang's backend.

For each case (B requests, a shared prefix, E new tokens each) and CP size N, one process plays
rank 0 of the N-rank group (``--ranks-modelled``: the other ranks' blocks arrive by a device copy
of the same bytes; say so in every row) and builds, for GLM-5.1-FP8's packed rows (656 B latent,
one 8,448 B indexer page per 64 tokens), three KV pools of SGLang 0.5.23's classes:

- ``sglang``: ``PageInterleaveDSATokenToKVPool`` exactly as SGLang ships it (its value-keyed
  scratch plan, ``begin_shard_extend``);
- ``cpkv``: ``CpkvSharedKVPool`` (what ``--cpkv-shared-kv`` installs);
- ``replica``: ``DSATokenToKVPool`` (SGLang's default CP path: every rank a full copy).

Measured from the real objects, per pool and case:

- ``bytes_per_token``: resident bytes per token per layer (latent + indexer buffers / rows), and
  ``scratch_bytes``: the two scratch slots, with SGLang's own scratch spec for GLM-5.1 (8 context
  lengths + the chunk; ``--context-len``, ``--chunked``);
- ``tokens_per_rank`` and ``tokens_cached`` for ``--kv-budget-gib`` of KV budget per rank over all
  78 layers (indexer keys only on IndexCache's full layers);
- ``gather_sent_bytes`` / ``gather_received_bytes`` per layer (this rank's packed block; the
  N blocks the all-gather assembles) and per forward (x 78 layers), ``scratch_pages`` the batch
  occupies in a slot;
- ``plan_host_us`` (the forward's plan: SGLang's ``prepare_kv_shard_forward`` into the pool) and
  ``plan_syncs`` (``torch.cuda.set_sync_debug_mode`` counts; on a CPU: not counted, None);
  ``layer_host_us`` and ``layer_syncs`` for the pool's per-layer calls (index store, latent store,
  index and latent reads that wait for and kick the layer-ahead gather);
- on a GPU, ``layer_ms``: one DSA layer through SGLang's ``DeepseekSparseAttnBackend`` and
  ``Indexer`` (the indexer's key store, DeepGEMM fp8 MQA logits and SGLang's torch top-k from the
  pool, ``forward_extend`` with SGLang's Triton sparse-MLA prefill) per pool, CUDA events, and
  ``layer_ms_nvlink``: the same plus the modelled all-gather of ``gather_received_bytes`` at
  ``--nvlink-gbps`` (a model, not a measurement). SGLang's sharded pool is refused by SGLang's
  own gate for this backend on Hopper (``validate_kv_shard_attention_backend``: trtllm prefill
  and decode only, SM100): its row records that refusal instead of a time.

Then a TTFT model for a 128K prompt at CP 8 over 78 layers (``ttft.*`` rows): chunked prefill in
``--chunked`` chunks, each chunk's per-layer time interpolated from the measured cases, plus the
plan per forward and the modelled all-gather. Writes ``shared-kv-vs-upstream.json``/``.png``/``.md``
through benchkit.

    PYTHONPATH=$(printf '%s:' packages/*/src tools/benchkit/src) CPKV_SHARED_KV=1 \\
        python3 packages/sglang-integration/benchmarks/bench_shared_kv_vs_upstream.py --out OUT
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "packages" / "sglang-integration" / "tests"))

P = 64
LAYERS_GLM = 78
#: case -> (requests, shared prefix tokens, new tokens each, prefix shared by all requests)
CASES = {
    "8x(64K+2K)": (8, 65536, 2048, True),
    "8x(16K+2K)": (8, 16384, 2048, True),
    "4x(32K+4K)": (4, 32768, 4096, True),
    "1x(64K+2K)": (1, 65536, 2048, True),
    "8x8K fresh": (8, 0, 8192, False),
}
POOLS = ("sglang", "cpkv", "replica")
#: SGLang's DSA prefill kernels this benchmark runs -> query heads per rank (0: GLM-5.1's 64, the
#: real rank at TP = CP, attention TP 1). SGLang validated its Triton sparse MLA up to 32 heads;
#: FlashMLA's sparse prefill takes 64 on Hopper (SGLang pads fewer up to 64).
PREFILL_HEADS = {"triton_sparse_mla": 32, "flashmla_sparse": 0}
FIXTURE = str(ROOT / "packages" / "sglang-integration" / "tests" / "fixtures" / "glm51_fp8")
#: single-request chunks of a 128K prompt at CP 8 measured for the TTFT model: (prefix, chunk)
TTFT_POINTS = {
    "ttft 0+16K": (0, 16384),
    "ttft 56K+16K": (57344, 16384),
    "ttft 112K+16K": (114688, 16384),
}


class CopyCommunicator:
    """The all-gather of an N-rank group played by one process: this rank's block copied into
    every rank's place (the same bytes an all-gather writes; the content of the other blocks is
    this rank's, which a benchmark does not read for correctness)."""

    def __init__(self, group: Any, device: Any, **_: Any) -> None:
        self.world = group.world_size

    def change_state(self, enable: Any = None, **_: Any):
        return contextlib.nullcontext()

    def all_gather(self, output, input, stream=None, sizes=None) -> None:
        output.view(self.world, *input.shape).copy_(input.expand(self.world, *input.shape))


class CopyGroup:
    """An N-rank group of which this process is rank 0; its gathers are device copies."""

    def __init__(self, world: int, device: torch.device) -> None:
        self.world_size, self.rank_in_group, self.device = world, 0, device
        self.cpu_group = self  # what the pool hands its communicator
        self.unique_name = f"copy{world}"

    def all_gather_into_tensor(self, output, input) -> None:
        output.view(self.world_size, *input.shape).copy_(
            input.expand(self.world_size, *input.shape)
        )


def _pool_bytes(pool: Any) -> tuple[int, int]:
    """(resident bytes of the pool's buffers, scratch bytes of its two slots)."""
    resident = sum(t.numel() * t.element_size() for t in pool.kv_buffer)
    resident += sum(t.numel() * t.element_size() for t in pool.index_key_cache.buffer)
    scratch = sum(
        t.numel() * t.element_size()
        for s in getattr(pool, "_slots", [])
        for t in s.tensors.values()
    )
    return resident, scratch


class SyncCounter:
    """Host syncs of a block, by ``torch.cuda.set_sync_debug_mode("warn")`` (CUDA only)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.count: int | None = None

    def __enter__(self) -> SyncCounter:
        if self.cuda:
            self._caught = warnings.catch_warnings(record=True)
            self._log = self._caught.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            self.count = sum("synchroniz" in str(w.message) for w in self._log)
            self._caught.__exit__(*exc)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_ms(fn, device: torch.device, reps: int) -> float:
    """Median time of ``fn`` in ms (benchkit: CUDA events on a GPU, perf_counter on a CPU)."""
    import benchkit

    if device.type == "cuda":
        samples = benchkit.cuda_event_times(fn, reps=reps, warmup=1)
    else:
        samples = benchkit.wall_times(fn, reps=reps, warmup=1)
    return benchkit.quantiles(samples).p50 * 1e3


# ---- one case ------------------------------------------------------------------------------


def _batch(cache: Any, requests: int, prefix: int, extend: int, shared: bool) -> list:
    """Commit the shared prefix (as an earlier forward would have), then lay out the batch."""
    from _skv_backend_model import Extend, Hit

    if shared and prefix:
        cache.commit(cache.step([Extend("prefix", prefix)]))
        return cache.step([Extend(f"r{i}", extend, Hit("prefix", prefix)) for i in range(requests)])
    return cache.step([Extend(f"r{i}", prefix + extend) for i in range(requests)])


def _pools(dep: Any, n: int, total_tokens: int, requests: int, context_len: int, chunked: int):
    """The three pools of one case on ``dep``'s device, two layers each (both run the indexer)."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.srt.mem_cache.page_interleave import PageShardSpec
    from sglang_cpkv.plugin.shared_kv._capacity import ScratchSpec
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    spec = ScratchSpec.for_model(
        context_len=context_len,
        chunked_prefill_size=chunked,
        shard_size=n,
        page_size=P,
        latent_bytes=656,
        index_head_dim=128,
    )
    shard = PageShardSpec(
        shard_rank=0,
        shard_size=n,
        page_size=P,
        max_prefix_tokens=spec.max_prefix_tokens,
        chunk_tokens=spec.chunk_tokens,
    )
    local_pages = -(-total_tokens // (n * P)) + 2 * requests + 2
    kw = dep._pool_kwargs(0, 2, (False, False), max_requests=requests)
    group = dep.group
    pools = {
        "sglang": CpkvSharedKVPool.__mro__[1](
            local_pages * P, shard_spec=shard, shard_group=group, **kw
        ),
        "cpkv": CpkvSharedKVPool(local_pages * P, shard_spec=shard, shard_group=group, **kw),
        "replica": DSATokenToKVPool(n * (local_pages + 1) * P, **kw),
    }
    return pools, spec


def _layer_inputs(dep: Any, rows: list, fb: Any, heads: int) -> dict:
    """Random tensors of one layer: the chunk's latent KV and index keys, this rank's queries."""
    from sglang.srt.layers.cp.base import get_cp_strategy

    dev, t = dep.device, fb.extend_num_tokens
    local = get_cp_strategy().shard_local_tokens(torch.arange(t, device=dev)).numel()
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device=dev)

    q_idx, _ = dep.act_quant(rnd(local, 32, 128).bfloat16().contiguous())
    return {
        "kv": rnd(t, 576).bfloat16(),
        "key": rnd(t, 128).bfloat16(),
        "q": rnd(local, heads, 576).bfloat16(),
        "q_idx": q_idx,
        "w": rnd(local, 32, 1),
    }


def _tables(fb: Any, req_to_token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list]:
    """(page table, sequence lengths, the same on the host) of this rank's kept requests, as
    ``init_forward_metadata`` slices them (``page_table[bs_idx]``); the pool-level measurement
    reads through these (host lengths from the host, as the indexer takes them: no sync)."""
    from sglang.srt.layers.attention.dsa.utils import can_dsa_prefill_cp_interleave
    from sglang.srt.layers.cp.base import get_cp_strategy

    width = int(fb.seq_lens_cpu.max())
    table = req_to_token[fb.req_pool_indices.long(), :width]
    seq, seq_cpu = fb.seq_lens, fb.seq_lens_cpu
    if can_dsa_prefill_cp_interleave(fb):
        _, _, bs_idx_cpu, bs_idx = get_cp_strategy().shard_per_request(
            fb.extend_seq_lens_cpu, fb.extend_seq_lens
        )
        table, seq, seq_cpu = table[bs_idx], seq[bs_idx], seq_cpu[bs_idx_cpu]
    return table, seq, [int(n) for n in seq_cpu]


def _pool_layer(pool: Any, layer: Any, fb: Any, tables: tuple, x: dict, dep: Any) -> None:
    """The pool calls of one DSA layer, in the backend's order: the indexer's key store and page
    read, the latent store and the key-buffer read (which waits for this layer's gather and kicks
    the next one on a sharded pool)."""
    loc, lid = fb.out_cache_loc, layer.layer_id
    table, seq, seq_cpu = tables
    k_fp8, k_scale = dep.act_quant(x["key"].contiguous())
    pool.set_index_k_scale_buffer(lid, loc, k_fp8, k_scale)
    pages = torch.div(table[:, ::P], P, rounding_mode="floor")
    pool.get_index_k_scale_buffer(lid, seq, pages, sum(seq_cpu), max(seq_cpu))
    pool.set_mla_kv_buffer(layer, loc, x["kv"][:, None, :512], x["kv"][:, None, 512:])
    pool.get_key_buffer(lid)


def _backend_layer(dep: Any, backend: Any, indexer: Any, fb: Any, layer: Any, x: dict) -> Any:
    """One DSA layer through SGLang's backend and indexer (production order: the indexer's key
    store and top-k from the pool, then ``forward_extend``), the CP gathers included."""
    from sglang.srt.layers.cp.base import get_cp_strategy

    strategy, lid = get_cp_strategy(), layer.layer_id
    keys = strategy.materialize_full_indexer_k_cache(strategy.shard_hidden_states(x["key"], fb), fb)
    indexer._store_index_k_cache(forward_batch=fb, layer_id=lid, key=keys, act_quant=dep.act_quant)
    q_idx = x["q_idx"]
    if dep.device.type == "cpu":
        import _skv_backend_stand_ins as stand_ins

        q_idx = q_idx.as_subclass(stand_ins.IndexedCPU)
    meta = backend.get_indexer_metadata(lid, fb)
    topk = indexer._get_topk_ragged(False, fb, lid, q_idx, x["w"], meta).as_subclass(torch.Tensor)
    kv = strategy.gather_kv_cache(strategy.shard_hidden_states(x["kv"], fb), fb)
    q = x["q"]
    return backend.forward_extend(
        q[..., :512],
        kv[:, None, :512],
        kv[:, None, :512],
        layer,
        fb,
        q_rope=q[..., 512:],
        k_rope=kv[:, None, 512:],
        topk_indices=topk,
    )


def _refusal(dep: Any) -> str:
    """SGLang's own gate on this deployment (its function, the plugin's wrapper peeled off)."""
    import inspect

    from sglang.srt.arg_groups import kv_shard_hook

    gate = inspect.unwrap(kv_shard_hook.validate_kv_shard_attention_backend)
    try:
        gate(dep.args)
    except Exception as exc:  # SGLang raises ValueError with its reason
        return f"refused by SGLang's gate: {str(exc).splitlines()[0][:200]}"
    return ""


def measure_case(
    name: str, shape: tuple, cp: int, args: argparse.Namespace, prefill: str = "triton_sparse_mla"
) -> list[dict]:
    """Every row of one (case, CP size, prefill kernel): three pools, rank 0 of ``cp`` modelled
    in one process."""
    import _skv_backend_rank as rank_mod
    from _skv_backend_model import Cache
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    requests, prefix, extend, shared = shape
    device = torch.device(args.device)
    # GLM-5.1 at TP = CP (one node), fp8 KV; the query heads per rank the kernel takes
    config = rank_mod.Config(
        f"{prefill}/fp8", prefill, "fp8_e4m3", 2048, query_heads=PREFILL_HEADS[prefill]
    )
    dep = rank_mod.Deployment(config, cp, 0, CopyGroup(cp, device), device, FIXTURE, (9, 0))
    total = (prefix if shared else requests * prefix) + requests * extend
    out = []
    with dep.context():
        r2t = ReqToTokenPool(
            size=requests + 2,
            max_context_len=prefix + extend + 2 * P,
            device=device,
            enable_memory_saver=False,
        )
        cache = Cache(cp, *r2t.req_to_token.shape)
        rows = _batch(cache, requests, prefix, extend, shared)
        r2t.req_to_token.copy_(cache.req_to_token.to(device))
        pools, _ = _pools(dep, cp, total, requests, args.context_len, args.chunked)
        heads = dep.model_config.num_attention_heads // config.attn_tp
        layers = [RadixAttention(heads, 576, 576**-0.5, 1, lid, v_head_dim=512) for lid in (0, 1)]
        case = {"case": name, "cp": cp, "prefill": prefill, "query_heads": heads,
                "ranks_modelled": f"rank 0 of {cp}"}  # fmt: skip
        refusal = _refusal(dep)
        for pool_name in POOLS:
            pool = pools.pop(pool_name)
            m = PoolRun(dep, pool, pool_name, rows, r2t, layers, args)
            out.append(
                {
                    **case,
                    "pool": pool_name,
                    **m.capacity(),
                    **m.plan(),
                    **m.layer(),
                    "refusal": refusal if pool_name == "sglang" else "",
                }
            )
            del pool, m
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


class PoolRun:
    """One pool of one case: its capacity, its plan, its per-layer calls, one layer through
    SGLang's backend (the pool's forward batch built and split once)."""

    def __init__(self, dep, pool, name, rows, r2t, layers, args) -> None:
        import _skv_backend_rank as rank_mod
        from sglang.srt.layers.cp.utils import prepare_cp_forward

        self.dep, self.pool, self.name, self.rows, self.r2t = dep, pool, name, rows, r2t
        self.layers, self.args = layers, args
        self.sharded = name != "replica"
        self.device = dep.device
        self.fb = rank_mod.forward_batch(rows, r2t.req_to_token, self.device)
        prepare_cp_forward(self.fb)
        self.x = _layer_inputs(dep, rows, self.fb, layers[0].tp_q_head_num)
        self.tables = _tables(self.fb, r2t.req_to_token)

    def capacity(self) -> dict:
        """Resident bytes per token (from the pool's buffers), scratch, tokens for the budget."""
        from sglang_cpkv.plugin.hooks.indexcache_overrides import effective_schedule

        pool, cp = self.pool, self.dep.cp
        _, scratch = _pool_bytes(pool)
        latent = pool.kv_buffer[0]
        latent_tok = latent.numel() * latent.element_size() // latent.shape[0]
        index = pool.index_key_cache.buffer[0]
        index_tok = index.numel() * index.element_size() // (index.shape[0] * P)
        index_layers = effective_schedule(self.dep.model_config.hf_config).num_full
        token_bytes = LAYERS_GLM * latent_tok + index_layers * index_tok
        budget = self.args.kv_budget_gib * (1 << 30)
        per_rank = max(int((budget - scratch) // token_bytes), 0)
        return {
            "bytes_per_token_layer": latent_tok + index_tok,
            "token_bytes_all_layers": token_bytes,
            "scratch_bytes": scratch,
            "kv_budget_gib": self.args.kv_budget_gib,
            "tokens_per_rank": per_rank,
            "tokens_cached": per_rank * (cp if self.sharded else 1),
        }

    def _pool_layer(self) -> None:
        _pool_layer(self.pool, self.layers[0], self.fb, self.tables, self.x, self.dep)

    def plan(self) -> dict:
        """The forward's plan (``prepare_kv_shard_forward``, as ``init_forward_metadata`` runs
        it): host time and syncs after a warm-up forward, the gather block, scratch pages."""
        from sglang.srt.layers.attention.kv_shard_hooks import prepare_kv_shard_forward

        zero = {
            "plan_host_us": 0.0,
            "plan_syncs": 0,
            "gather_block_pages": 0,
            "scratch_pages": 0,
            "gather_sent_bytes": 0,
            "gather_received_bytes": 0,
        }
        if not self.sharded:
            self._pool_layer()  # warm-up of the layer calls measured next
            return zero | {"gather_received_bytes_forward": 0}
        pool, cp, req_to_token = self.pool, self.dep.cp, self.r2t.req_to_token
        prepare_kv_shard_forward(pool, req_to_token, self.fb)  # resolves/builds the ops
        self._pool_layer()
        _sync(self.device)
        with SyncCounter(self.device) as syncs:
            t0 = time.perf_counter()
            prepare_kv_shard_forward(pool, req_to_token, self.fb)
            host_us = (time.perf_counter() - t0) * 1e6
        if self.name == "cpkv":
            block, fresh = pool.cpkv_forward.placement.block, pool.cpkv_forward.placement.num_fresh
        else:  # SGLang's plan: its host bound block, one chunk page per written position-page
            block = pool._block_pages
            fresh = sum(-(-r.seq // P) - r.prefix // P for r in self.rows)
        page_bytes = P * 656 + 8448  # one latent page + one indexer page per layer
        received = cp * block * page_bytes
        return {
            "plan_host_us": host_us,
            "plan_syncs": syncs.count,
            "gather_block_pages": block,
            "scratch_pages": cp * block + fresh,
            "gather_sent_bytes": block * page_bytes,
            "gather_received_bytes": received,
            "gather_received_bytes_forward": received * LAYERS_GLM,
        }

    def layer(self) -> dict:
        """The pool's per-layer calls (host, syncs); on the cpkv and replica pools one layer
        through SGLang's backend and indexer, and that plus the modelled all-gather."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        _sync(self.device)
        with SyncCounter(self.device) as syncs:
            t0 = time.perf_counter()
            self._pool_layer()
            host_us = (time.perf_counter() - t0) * 1e6
        row = {"layer_host_us": host_us, "layer_syncs": syncs.count}
        if self.name == "sglang" or not self.args.layer:
            return row
        dep, fb, x, (l0, l1) = self.dep, self.fb, self.x, self.layers
        backend = dep._backend(self.pool, self.r2t, draft=False)
        indexer = dep._indexer(0)

        def forward_two_layers() -> None:
            backend.init_forward_metadata(fb)
            _backend_layer(dep, backend, indexer, fb, l0, x)
            _backend_layer(dep, backend, indexer, fb, l1, x)

        with forward_context(ForwardContext(attn_backend=backend)):
            row["forward2_ms"] = _time_ms(forward_two_layers, self.device, self.args.reps)
            backend.init_forward_metadata(fb)
            _backend_layer(dep, backend, indexer, fb, l0, x)
            row["layer_ms"] = _time_ms(
                lambda: _backend_layer(dep, backend, indexer, fb, l1, x),
                self.device,
                self.args.reps,
            )
        # the all-gather at the stated bandwidth: a model, added serially (no overlap)
        received = self.plan_received()
        gather_ms = received / (self.args.nvlink_gbps * 1e9) * 1e3
        return row | {
            "nvlink_gbps": self.args.nvlink_gbps,
            "gather_ms_model": gather_ms,
            "layer_ms_nvlink": row["layer_ms"] + gather_ms,
        }

    def plan_received(self) -> int:
        if not self.sharded:
            return 0
        block = (
            self.pool.cpkv_forward.placement.block
            if self.name == "cpkv"
            else self.pool._block_pages
        )
        return self.dep.cp * block * (P * 656 + 8448)


# ---- the TTFT model ----------------------------------------------------------------------


def ttft_model(rows: list[dict], prompt: int = 131072, chunk: int = 16384) -> list[dict]:
    """Prefill of one ``prompt``-token request at CP 8 in ``chunk``-token forwards, 78 layers:
    per forward the plan plus 78 x (layer time at that prefix, interpolated linearly between the
    measured ``ttft`` points, + the modelled all-gather of its history at the stated bandwidth).
    Two bounds: the gather serial after the layer, and fully hidden behind it (the pool gathers
    one layer ahead on a side stream)."""
    out = []
    prefills = sorted({r["prefill"] for r in rows if r["case"] in TTFT_POINTS})
    for prefill, pool in ((k, p) for k in prefills for p in ("cpkv", "replica")):
        pts = sorted(
            (TTFT_POINTS[r["case"]][0], r)
            for r in rows
            if r["case"] in TTFT_POINTS
            and r["pool"] == pool
            and r["prefill"] == prefill
            and "layer_ms" in r
        )
        if len(pts) < 2:
            continue
        serial = hidden = 0.0
        done, curve = [0], [0.0]
        for start in range(0, prompt, chunk):
            # linear in the prefix between the two nearest measured points
            lo = max((p for p in pts if p[0] <= start), default=pts[0], key=lambda p: p[0])
            hi = min((p for p in pts if p[0] >= start), default=pts[-1], key=lambda p: p[0])
            f = 0.0 if hi[0] == lo[0] else (start - lo[0]) / (hi[0] - lo[0])

            def at(key: str, lo=lo, hi=hi, f=f) -> float:
                return lo[1][key] + f * (hi[1][key] - lo[1][key])

            plan = at("plan_host_us") / 1e3
            serial += plan + LAYERS_GLM * (at("layer_ms") + at("gather_ms_model"))
            hidden += plan + LAYERS_GLM * max(at("layer_ms"), at("gather_ms_model"))
            done.append(start + chunk)
            curve.append(serial)
        base = pts[0][1]
        out.append(
            {
                k: base[k]
                for k in base
                if k
                in ("gpu_name", "torch", "triton", "cuda", "timestamp", "command", "git_commit")
            }
            | {
                "op": "shared-kv-vs-upstream",
                "case": f"TTFT {prompt // 1024}K prompt",
                "cp": 8,
                "pool": pool,
                "prefill": prefill,
                "query_heads": base.get("query_heads"),
                "ttft_ms_gather_serial": serial,
                "ttft_ms_gather_hidden": hidden,
                "tokens_done": done,
                "cumulative_ms_serial": curve,
                "chunk": chunk,
                "nvlink_gbps": base.get("nvlink_gbps"),
            }
        )
    return out


# ---- record ------------------------------------------------------------------------------


def _mib(b: float | None) -> str:
    return "" if b is None else f"{b / (1 << 20):,.1f}"


def _cell(v: Any, fmt: str = "{:,.1f}") -> str:
    return "" if v is None else fmt.format(v)


def _prefill(row: dict) -> str:
    """The prefill kernel and the query heads per rank it ran with, e.g. ``triton_sparse_mla (32)``
    (the capacity and plan columns do not depend on it)."""
    heads = row.get("query_heads")
    return f"{row.get('prefill', '')}" + (f" ({heads})" if heads else "")


def _gpu(row: dict) -> str:
    """The GPU a row ran on, short (``H100``): rows of several runs share the page."""
    return ((row.get("gpu_name") or "").removeprefix("NVIDIA ").split() or ["?"])[0]


def sections(rows: list[dict]) -> dict[str, str]:
    import benchkit

    case_rows = [r for r in rows if not r["case"].startswith("TTFT")]
    header = [
        "GPU",
        "case",
        "CP",
        "pool",
        "prefill (heads)",
        "KV tokens / rank",
        "tokens cached",
        "scratch MiB",
        "gather MiB / layer (recv)",
        "scratch pages",
        "plan us",
        "plan syncs",
        "pool ops us / layer",
        "layer syncs",
        "layer ms",
        "+ NVLink model ms",
        "note",
    ]
    body = [
        [
            _gpu(r),
            r["case"],
            r["cp"],
            r["pool"],
            _prefill(r),
            f"{r['tokens_per_rank']:,}",
            f"{r['tokens_cached']:,}",
            _mib(r["scratch_bytes"]),
            _mib(r["gather_received_bytes"]),
            r["scratch_pages"],
            _cell(r.get("plan_host_us"), "{:,.0f}"),
            _cell(r.get("plan_syncs"), "{}"),
            _cell(r.get("layer_host_us"), "{:,.0f}"),
            _cell(r.get("layer_syncs"), "{}"),
            _cell(r.get("layer_ms"), "{:,.2f}"),
            _cell(r.get("layer_ms_nvlink"), "{:,.2f}"),
            r.get("refusal") or r["ranks_modelled"],
        ]
        for r in case_rows
    ]
    ttft = [r for r in rows if r["case"].startswith("TTFT")]
    ttft_table = benchkit.markdown_table(
        [
            "GPU",
            "model",
            "pool",
            "prefill (heads)",
            "TTFT ms, gather after each layer",
            "TTFT ms, gather hidden",
        ],
        [
            [
                _gpu(r),
                r["case"],
                r["pool"],
                _prefill(r),
                f"{r['ttft_ms_gather_serial']:,.0f}",
                f"{r['ttft_ms_gather_hidden']:,.0f}",
            ]
            for r in ttft
        ],
    )
    return {"vs-upstream": benchkit.markdown_table(header, body), "ttft": ttft_table}


def figure(rows: list[dict]):
    import benchkit

    panels = []
    cases = [c for c in CASES]
    for metric, title, unit in (
        ("tokens_cached", "KV tokens the CP group caches", "tokens"),
        ("gather_received_bytes", "all-gather per layer (received)", "bytes"),
        ("layer_ms", "one DSA layer (gather = device copy)", "ms"),
    ):
        lines = []
        # capacity and gathers do not depend on the prefill kernel: drawn once, from its first
        kernels = sorted({r.get("prefill") for r in rows if r["case"] in CASES}, key=str)
        for kernel in kernels if metric == "layer_ms" else kernels[:1]:
            for pool in POOLS:
                for cp in sorted({r["cp"] for r in rows if r["case"] in CASES}):
                    pts = [
                        (cases.index(r["case"]), r[metric])
                        for r in rows
                        if r["pool"] == pool
                        and r["cp"] == cp
                        and r.get("prefill") == kernel
                        and r["case"] in CASES
                        and r.get(metric) is not None
                    ]
                    if pts:
                        xs, ys = zip(*sorted(pts), strict=True)
                        label = f"{pool} cp{cp}" + (f" {kernel}" if metric == "layer_ms" else "")
                        lines.append(benchkit.Line(label, xs, ys))
        panels.append(benchkit.Panel(title, "case", unit, lines, xticks=cases))
    ttft = [r for r in rows if r["case"].startswith("TTFT")]
    if ttft:
        lines = [
            benchkit.Line(f"{_gpu(r)} {r['pool']} {_prefill(r)}",
                          [t / 1024 for t in r["tokens_done"]],
                          [ms / 1e3 for ms in r["cumulative_ms_serial"]])
            for r in ttft if "tokens_done" in r
        ]  # fmt: skip
        panels.append(
            benchkit.Panel("TTFT model (78 DSA attention layers, CP 8; gather at the NVLink "
                           "model, serial)", "prompt tokens prefilled (K)", "s", lines)
        )  # fmt: skip
    return benchkit.Figure(
        panels, title="shared KV vs SGLang's sharded pool vs the replica", ncols=2
    )


REPORT_KEY = ("op", "case", "cp", "pool", "prefill")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the JSON and PNG")
    ap.add_argument("--md", type=Path, help="Markdown page whose tables are rewritten")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", nargs="*", default=list(CASES), help=f"of {list(CASES)}")
    ap.add_argument("--cp", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply token counts (a CPU check of the script: --scale 0.004)",
    )
    ap.add_argument(
        "--kv-budget-gib",
        type=float,
        default=40.0,
        help="KV budget per rank for the capacity columns (default 40 GiB)",
    )
    ap.add_argument("--context-len", type=int, default=202752, help="GLM-5.1's context length")
    ap.add_argument("--chunked", type=int, default=65536, help="--chunked-prefill-size")
    ap.add_argument(
        "--nvlink-gbps",
        type=float,
        default=450.0,
        help="all-gather bandwidth of the model column, GB/s per GPU (default: "
        "H200 NVLink 4, 900 GB/s bidirectional, half each way)",
    )
    ap.add_argument(
        "--prefill-backends",
        nargs="+",
        default=["triton_sparse_mla"],
        choices=list(PREFILL_HEADS),
        help="SGLang DSA prefill kernels whose layer times are measured, each with every case "
        "(flashmla_sparse needs the sgl-flash-mla wheel; default: triton_sparse_mla)",
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-layer", dest="layer", action="store_false", help="skip layer times")
    ap.add_argument("--no-ttft", dest="ttft", action="store_false")
    ap.add_argument("--render", action="store_true", help="redraw from the JSON, no run")
    args = ap.parse_args(argv)
    import benchkit

    report = benchkit.Report("shared-kv-vs-upstream", figure, sections, key=REPORT_KEY)
    if args.render:
        report.publish([], args.out, md=args.md)
        return 0
    import _skv_backend_stand_ins as stand_ins
    import pytest
    from sglang_cpkv.plugin.entry import activate

    device = torch.device(args.device)
    if device.type == "cuda":
        stand_ins.stub_missing_packages()
    activate()
    env = benchkit.capture_env(device=args.device, package="sglang-integration")
    env = {
        k: env[k]
        for k in (
            "gpu_name",
            "torch",
            "triton",
            "cuda",
            "timestamp",
            "command",
            "git_commit",
            "cpu",
        )
    }

    def scaled(shape):
        r, p, e, sh = shape
        return (r, int(p * args.scale) // P * P, max(int(e * args.scale), 1), sh)

    rows: list[dict] = []
    with pytest.MonkeyPatch.context() as mp, stand_ins.installed(mp, device):
        from sglang.srt.mem_cache import page_interleave_pool

        mp.setattr(page_interleave_pool, "PyNcclCommunicator", CopyCommunicator)
        todo = [(c, CASES[c], cp) for c in args.cases for cp in args.cp]
        if args.ttft:
            todo += [(c, (1, p, e, True), 8) for c, (p, e) in TTFT_POINTS.items()]
        todo = [(*t, k) for k in args.prefill_backends for t in todo]
        for i, (name, shape, cp, prefill) in enumerate(todo):
            t0 = time.monotonic()
            rows += [
                {**env, **r, "op": "shared-kv-vs-upstream"}
                for r in measure_case(name, scaled(shape), cp, args, prefill)
            ]
            print(f"[{i + 1}/{len(todo)}] {name} cp{cp} {prefill}: "
                  f"{time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
    rows += ttft_model(rows)
    all_rows = report.publish(rows, args.out, md=args.md)
    print(benchkit.text_table(*_text(all_rows)))
    return 0


def _text(rows: list[dict]):
    header = ["case", "cp", "pool", "prefill", "tokens cached", "gather MiB/layer", "plan us",
              "layer ms"]  # fmt: skip
    body = [
        [
            r["case"],
            r.get("cp"),
            r["pool"],
            _prefill(r),
            r.get("tokens_cached", ""),
            _mib(r.get("gather_received_bytes")),
            _cell(r.get("plan_host_us"), "{:,.0f}"),
            _cell(r.get("layer_ms") or r.get("ttft_ms_gather_serial"), "{:,.2f}"),
        ]
        for r in rows
    ]
    return header, body


if __name__ == "__main__":
    sys.exit(main())
