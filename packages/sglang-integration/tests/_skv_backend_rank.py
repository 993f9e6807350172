"""One CP rank of the backend-level shared-KV suite: SGLang's DSA attention over two KV pools.

Per deployment (:class:`Config` at a CP size) the rank resolves the server arguments exactly as
``cpkv-serve --cpkv-shared-kv`` does (cpkv's flag translation, then SGLang's resolution with the
plugin's hooks applied), publishes its runtime context (SGLang's ``create_context``), and builds
two *sides* that differ only in their KV pool:

- ``cpkv``: the class SGLang's registry holds for ``PageInterleaveDSATokenToKVPool`` after the
  plugin loaded (asserted to be ``CpkvSharedKVPool``), over the CP group;
- ``replica``: SGLang's unsharded ``DSATokenToKVPool`` (every rank a full copy: the default CP
  path), indexed by the same logical locations.

Each side has a real ``DeepseekSparseAttnBackend`` and a real ``Indexer`` for the target model
(``LAYERS`` layers, one of them sharing its top-k as IndexCache makes it) and for the NextN
draft (its own pool, one layer after the target's, as SGLang's MTP pool builder lays it out).
A forward runs as a model does: ``prepare_cp_forward``, ``init_forward_metadata`` (hooked),
then per layer the indexer's key store, its top-k from the pool (``_get_topk_ragged``) and
``forward_extend`` (which stores the latent KV and reads it back), each layer writing before it
reads. :func:`compare` holds the two sides bitwise equal per (request, position).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import _skv_backend_model as model
import _skv_backend_stand_ins as stand_ins
import torch
from _skv_backend_model import BatchRow, Identity, P

#: Target layers in IndexCache's pattern "FSFS": layers 1 and 3 reuse the top-k of 0 and 2.
SKIP_TOPK = (False, True, False, True)
LAYERS = len(SKIP_TOPK)
HEADS = 8  # query heads of the test layers (FlashMLA pads to 64/128; Triton takes any)
LOCAL_PAGES = 48  # pages per rank; the replica holds all N * (48 + 1)
GATHER_PAGES_PER_RANK, WRITE_PAGES = 24, 24
MAX_REQUESTS = 16


SM90, SM100 = (9, 0), (10, 0)


@dataclass(frozen=True)
class Config:
    """One served configuration: prefill backend, KV dtype, indexer top-k and top-k kernel."""

    name: str
    backend: str
    kv_dtype: str  # "bfloat16" | "fp8_e4m3"
    index_topk: int
    #: GLM-5.1's query heads replaced by this count (0: the model's 64), for a CP size whose
    #: attention TP must stay 1 (SGLang allows CP on one node only: TP <= 8)
    query_heads: int = 0
    #: SGLang's defaults, ``SGLANG_DSA_FUSE_TOPK=1`` with ``--dsa-topk-backend sgl-kernel`` (the
    #: top-k fused with its page or offset transform), instead of its torch top-k followed by
    #: the unfused transform
    fused_topk: bool = False
    #: the GPU the deployment is resolved for (None: the worker's, an H200); trtllm needs SM100
    capability: tuple[int, int] | None = None
    #: the CP sizes the suite deploys it at (each must also be one the worker runs)
    cps: tuple[int, ...] = (4, 2)

    @property
    def attn_tp(self) -> int:
        """Attention TP per CP rank: SGLang validated its Triton sparse MLA for <= 32 heads per
        rank, so GLM-5.1's 64 heads take attention TP 2 there (1 elsewhere, or with
        ``query_heads`` <= 32)."""
        return 2 if self.backend == "triton_sparse_mla" and not self.query_heads else 1

    def _overrides(self) -> dict:
        out = {"index_topk": self.index_topk}
        return out | ({"num_attention_heads": self.query_heads} if self.query_heads else {})

    def argv(self, cp: int, model_path: str) -> list[str]:
        """``cpkv-serve`` arguments of a GLM-5.1 prefill node at CP ``cp`` with EAGLE."""
        decode = {"fp8_e4m3": "flashmla_kv", "bfloat16": "flashmla_sparse"}[self.kv_dtype]
        if self.backend == "trtllm":  # one fp8 layout family on both sides (raw rows)
            decode = "trtllm"
        topk = "sgl-kernel" if self.fused_topk else "torch"
        return [
            "--model-path", model_path, "--tp", str(cp * self.attn_tp), "--enable-prefill-cp",
            "--attn-cp-size", str(cp), "--cp-strategy", "interleave",
            "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake",
            "--kv-cache-dtype", self.kv_dtype, "--dsa-prefill-backend", self.backend,
            "--dsa-decode-backend", decode, "--dsa-topk-backend", topk,
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
            "--speculative-dsa-topk-backend", topk,
            "--json-model-override-args", json.dumps(self._overrides()),
            "--cpkv-shared-kv",
        ]  # fmt: skip


def resolve(config: Config, cp: int, model_path: str, capability: tuple[int, int]) -> Any:
    """SGLang's resolved server arguments, translated and resolved as ``cpkv-serve`` does."""
    from sglang_cpkv.serve._dry_run import resolve as resolve_argv
    from sglang_cpkv.serve._flags import parse_cpkv_args, with_sharding

    parsed = parse_cpkv_args(config.argv(cp, model_path))
    assert parsed.shared_kv
    return resolve_argv(with_sharding(list(parsed.sglang_argv)), capability)


@dataclass
class Side:
    """One KV pool with its backends and indexers (target and draft)."""

    name: str
    pool: Any
    draft_pool: Any
    backend: Any
    draft_backend: Any
    indexer: Any
    draft_indexer: Any


@dataclass
class LayerRecord:
    """What one layer of one forward computed on one rank (CPU tensors)."""

    layer: int
    logits: torch.Tensor | None
    index_rows: tuple[torch.Tensor, torch.Tensor] | None
    topk: torch.Tensor
    out: torch.Tensor
    reads: list[list[Identity]]
    #: per query row, each row read with the token its draft position was fed (None on a
    #: target layer's rows)
    feeds: list[list[tuple[Identity, model.Token | None]]] = field(default_factory=list)


@dataclass
class ForwardRecord:
    rows: list[tuple[BatchRow, int]]  # the rank's query rows: (batch row, position)
    layers: list[LayerRecord] = field(default_factory=list)
    method: str = ""
    #: cpkv's side: how many lookups the forward's plan computed and cached (one per distinct
    #: table SGLang passed, whatever the layer count); None on the replica
    lookups: int | None = None
    #: the top-k holds pool slots (fused PAGED: the kernel maps positions through the attention
    #: page table), which differ between the pools; what they name is compared instead
    topk_is_slots: bool = False
    #: the prefill implementation the backend ran, and the rows its attention kernel read
    #: (dtype x width: raw fp8 rows under trtllm, bf16 rows elsewhere)
    impl: str = ""
    kv_read: str = ""


class Deployment:
    """A rank's deployment of one :class:`Config` at one CP size (see the module docstring)."""

    def __init__(self, config: Config, cp: int, rank: int, group: Any, device: torch.device,
                 model_path: str, capability: tuple[int, int]) -> None:  # fmt: skip
        from sglang.srt.configs.model_config import ModelConfig

        self.config, self.cp, self.rank, self.group = config, cp, rank, group
        from sglang.srt.environ import envs

        self.device, self.capability = device, config.capability or capability
        with envs.SGLANG_DSA_FUSE_TOPK.override(config.fused_topk):
            self.args = resolve(config, cp, model_path, self.capability)
        with self._emulated():
            self.model_config = ModelConfig.from_server_args(self.args)
        fp8 = config.kv_dtype == "fp8_e4m3"
        self.kv_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.act_quant = stand_ins.torch_act_quant if device.type == "cpu" else _triton_act_quant()

    def _emulated(self):
        from sglang_cpkv.serve._dry_run import emulated_gpu

        return (
            emulated_gpu(self.capability) if self.device.type == "cpu" else contextlib.nullcontext()
        )

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """This rank's runtime context (SGLang's ``create_context``), CP strategy and group."""
        import sglang.srt.layers.cp.base as cp_base
        from sglang.srt.environ import envs
        from sglang.srt.runtime_context import SpawnRanks, create_context, get_parallel, use_context

        saved = cp_base._STRATEGY
        try:
            with self._emulated(), envs.SGLANG_DSA_FUSE_TOPK.override(self.config.fused_topk):
                gpu = self.device.index if self.device.type == "cuda" else None
                # this process is attention-TP rank 0 of CP rank `rank`
                world_rank = self.rank * self.config.attn_tp
                ranks = SpawnRanks(world_rank=world_rank, gpu_id=gpu)
                ctx = create_context(self.args, role="scheduler", ranks=ranks)
                with use_context(ctx):
                    parallel = ctx.parallel
                    assert parallel.attn_cp_rank == self.rank and parallel.attn_cp_size == self.cp
                    cp_base.init_cp_strategy(enable_prefill_cp=parallel.enable_prefill_cp,
                                             cp_size=parallel.attn_cp_size,
                                             cp_strategy=parallel.cp_strategy)  # fmt: skip
                    with get_parallel().override(attn_cp_group=self.group):
                        yield
        finally:
            cp_base._STRATEGY = saved

    # ---- construction (inside context()) ------------------------------------------------------

    def _pool_kwargs(self, start: int, layers: int, skip: Sequence[bool],
                     max_requests: int = MAX_REQUESTS) -> dict:  # fmt: skip
        from sglang.srt.configs.model_config import get_dsa_index_head_dim
        from sglang.srt.mem_cache.kv_cache_configurator import calculate_mla_kv_cache_dim

        mc = self.model_config
        return dict(
            page_size=P, kv_lora_rank=mc.kv_lora_rank, dtype=self.kv_dtype,
            qk_rope_head_dim=mc.qk_rope_head_dim, layer_num=layers, device=self.device,
            index_head_dim=get_dsa_index_head_dim(mc.hf_config), enable_memory_saver=False,
            kv_cache_dim=calculate_mla_kv_cache_dim(model_config=mc, kv_cache_dtype=self.kv_dtype),
            start_layer=start, end_layer=start + layers - 1, skip_topk_layers=list(skip),
            max_running_requests=max_requests,
        )  # fmt: skip

    def sharded_pool_class(self) -> type:
        """The class SGLang's builders construct for the sharded DSA pool (the registry's)."""
        from sglang.srt.mem_cache import kv_cache_configurator, page_interleave_pool

        cls = page_interleave_pool.PageInterleaveDSATokenToKVPool
        assert kv_cache_configurator.PageInterleaveDSATokenToKVPool is cls
        return cls

    def shard_spec(self, rank: int | None = None) -> Any:
        """SGLang's ``PageShardSpec`` for ``rank`` of this CP group (this deployment's rank by
        default): the suites' scratch bounds, ``GATHER_PAGES_PER_RANK`` and ``WRITE_PAGES``."""
        from sglang.srt.mem_cache.page_interleave import PageShardSpec

        n = self.cp
        return PageShardSpec(shard_rank=self.rank if rank is None else rank, shard_size=n,
                             page_size=P, max_prefix_tokens=GATHER_PAGES_PER_RANK * n * P,
                             chunk_tokens=WRITE_PAGES * P)  # fmt: skip

    def build(self, req_to_token: Any, *, replica: bool = True,
              max_requests: int = MAX_REQUESTS) -> dict[str, Side]:  # fmt: skip
        """Both sides (or cpkv's alone), on fresh pools admitting ``max_requests`` per batch."""
        from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

        n = self.cp
        spec = self.shard_spec()
        sharded = self.sharded_pool_class()
        size, replica_size = LOCAL_PAGES * P, n * (LOCAL_PAGES + 1) * P
        target = (0, LAYERS, SKIP_TOPK, max_requests)
        draft = (LAYERS, 1, (False,), max_requests)
        pools = {
            "cpkv": [
                sharded(size, shard_spec=spec, shard_group=self.group, **self._pool_kwargs(*where))
                for where in (target, draft)
            ]
        }
        if replica:
            pools["replica"] = [DSATokenToKVPool(replica_size, **self._pool_kwargs(*where))
                                for where in (target, draft)]  # fmt: skip
        sides = {}
        for name, (pool, draft_pool) in pools.items():
            sides[name] = Side(
                name, pool, draft_pool,
                self._backend(pool, req_to_token, draft=False),
                self._backend(draft_pool, req_to_token, draft=True),
                self._indexer(0), self._indexer(LAYERS),
            )  # fmt: skip
        return sides

    def _backend(self, pool: Any, req_to_token: Any, *, draft: bool) -> Any:
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        runner = SimpleNamespace(
            device=self.device, page_size=P, model_config=self.model_config,
            token_to_kv_pool=pool, req_to_token_pool=req_to_token, hisparse_coordinator=None,
            is_draft_worker=draft, max_running_requests=MAX_REQUESTS, kv_cache_dtype=self.kv_dtype,
        )  # fmt: skip
        with self._emulated():
            backend = DeepseekSparseAttnBackend(runner)
        if self.device.type == "cpu":  # the backend keeps SGLang's is_blackwell (asks CUDA)
            backend._is_blackwell = lambda: self.capability[0] in (10, 11, 12)
            if backend.dsa_prefill_impl == "trtllm" or backend.dsa_decode_impl == "trtllm":
                self._trtllm_scratch(backend)
        return backend

    def _trtllm_scratch(self, backend: Any) -> None:
        """The trtllm scratch ``DeepseekSparseAttnBackend.__init__`` allocates under CUDA only
        (its workspace and multi-CTA counters), made here as it makes them."""
        from sglang.srt.environ import envs
        from sglang.srt.layers.attention.trtllm_mla_backend import (
            make_persistent_multi_ctas_kv_counter_buffer,
        )

        size = envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.get() * backend.dcp_size
        backend.workspace_buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        backend._multi_ctas_kv_counter_buffer = make_persistent_multi_ctas_kv_counter_buffer(
            self.device, backend.num_dcp_q_heads, max_batch_size=MAX_REQUESTS
        )

    def _indexer(self, layer_id: int) -> Any:
        from sglang.srt.layers.attention.dsa.dsa_indexer import Indexer

        hf, mc = self.model_config.hf_config, self.model_config
        with stand_ins.no_rope_module(), self._emulated():
            return Indexer(
                hidden_size=64, index_n_heads=hf.index_n_heads, index_head_dim=hf.index_head_dim,
                rope_head_dim=mc.qk_rope_head_dim, index_topk=hf.index_topk, q_lora_rank=64,
                max_position_embeddings=4096, rope_theta=10000.0, layer_id=layer_id,
                scale_fmt=None, config=hf,
            )  # fmt: skip


def _triton_act_quant():
    from sglang.kernels.ops.quantization.act_quant_triton import act_quant

    return act_quant


def forward_batch(rows: Sequence[BatchRow], req_to_token: torch.Tensor, device: torch.device):
    """SGLang's ``ForwardBatch`` of an EXTEND step, as the scheduler builds it."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    i32 = torch.int32
    seq = [r.seq for r in rows]
    out_loc = torch.cat([req_to_token[r.req.row, r.prefix : r.seq] for r in rows]).long()
    positions = [p for r in rows for p in range(r.prefix, r.seq)]
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=len(rows),
        input_ids=torch.zeros(len(positions), dtype=torch.long, device=device),
        req_pool_indices=torch.tensor([r.req.row for r in rows], dtype=i32, device=device),
        seq_lens=torch.tensor(seq, dtype=i32, device=device),
        seq_lens_cpu=torch.tensor(seq, dtype=i32),
        out_cache_loc=out_loc.to(device), seq_lens_sum=sum(seq),
        positions=torch.tensor(positions, device=device),
    )  # fmt: skip
    fb.extend_prefix_lens = torch.tensor([r.prefix for r in rows], dtype=i32, device=device)
    fb.extend_prefix_lens_cpu = [r.prefix for r in rows]
    fb.extend_seq_lens = torch.tensor([r.extend for r in rows], dtype=i32, device=device)
    fb.extend_seq_lens_cpu = [r.extend for r in rows]
    fb.extend_num_tokens = len(positions)
    return fb


def run_forward(dep: Deployment, side: Side, rows: Sequence[BatchRow], req_to_token: Any,
                attention: stand_ins.AttentionCalls, *, draft: bool,
                chunked: str | None = None) -> ForwardRecord:  # fmt: skip
    """One extend forward of ``rows`` on ``side``: the target's layers, or (``draft``) EAGLE's
    prefill draft through SGLang's own ``_draft_extend_for_prefill`` (:func:`run_draft_extend`;
    ``chunked`` names the request whose prompt continues in a later chunk)."""
    if draft:
        return run_draft_extend(dep, side, rows, req_to_token, attention, chunked)
    from sglang.srt.layers.cp.base import get_cp_strategy
    from sglang.srt.layers.cp.utils import is_cp_active, prepare_cp_forward
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    dev = dep.device
    backend, indexer = side.backend, side.indexer
    fb = forward_batch(rows, req_to_token.req_to_token.cpu(), dev)
    toks = model.chunk(rows)
    cp_on = is_cp_active(fb)
    if cp_on:
        prepare_cp_forward(fb)
    strategy = get_cp_strategy()
    local = (strategy.shard_local_tokens(torch.arange(len(toks), device=dev)).tolist()
             if cp_on else list(range(len(toks))))  # fmt: skip
    record = ForwardRecord([toks[t] for t in local])
    logits = stand_ins.LogitsCalls()
    with forward_context(ForwardContext(attn_backend=backend)), logits.recording():
        backend.init_forward_metadata(fb)
        record.method = backend.get_topk_transform_method(fb.forward_mode).name
        record.topk_is_slots = backend.use_fused_topk and record.method == "PAGED"
        topk = None
        for layer_id, shares in enumerate(SKIP_TOPK):
            ident = [model.identity(r, p, layer_id) for r, p in toks]
            keys = kv = None
            if not shares:
                keys = torch.stack([model.index_key(i, indexer.head_dim) for i in ident])
                keys = keys.bfloat16().to(dev)
            kv = torch.stack([model.kv_row(i) for i in ident]).to(dev)
            if cp_on:  # each rank projects its own tokens
                keys = None if keys is None else strategy.shard_hidden_states(keys, fb)
                kv = strategy.shard_hidden_states(kv, fb)
            topk = _layer(dep, backend, indexer, fb, layer_id, [ident[t] for t in local], keys,
                          kv, topk, cp_on, record, logits, attention)  # fmt: skip
    plan = getattr(side.pool, "cpkv_forward", None)
    record.lookups = None if plan is None else len(plan._cache)
    return record


#: The identity RoPE cache (cos 1, sin 0) passed to trtllm's fused RoPE + fp8 cast, so the marks
#: in a row's RoPE part survive (see ``_skv_backend_stand_ins.REPLACEMENTS``).
_ROPE_POSITIONS = 4096


def _identity_rope(device: torch.device) -> torch.Tensor:
    half = model.D_ROPE // 2
    return torch.cat([torch.ones(_ROPE_POSITIONS, half), torch.zeros(_ROPE_POSITIONS, half)],
                     dim=1).to(device)  # fmt: skip


def _layer(
    dep: Deployment,
    backend: Any,
    indexer: Any,
    fb: Any,
    layer_id: int,
    mine: list[Identity],
    keys: torch.Tensor | None,
    kv: torch.Tensor,
    topk: torch.Tensor | None,
    cp_on: bool,
    record: ForwardRecord,
    logits: stand_ins.LogitsCalls,
    attention: stand_ins.AttentionCalls,
) -> torch.Tensor:
    """One layer as the model runs it: the indexer's key store and top-k (unless the layer
    shares the last top-k: ``keys`` None), then ``forward_extend``; appends its record.

    ``keys`` and ``kv`` are this rank's rows (under CP SGLang's shard, padded), ``mine`` the
    identities of its logical query rows. The CP gathers are SGLang's: the indexer keys' and
    the latent KV's here, except under trtllm with fp8, whose ``forward_extend`` takes the
    rank's KV, casts it with its RoPE and gathers it itself (``all_gather_dsa_trtllm_fp8_kv``).

    The queries (the indexer's and attention's) have the rank's rows as the model has them: under
    CP the shard ``EagerRunner._execute_extend_cp`` hands the model body, padded with zero rows to
    the rank's physical length (``pad_local_rows``: ``per_rank_actual_token``, what ``kv`` has),
    which ``init_forward_metadata`` plans for (``pad_dsa_cache_seqlens``). Handing the logical
    rows alone broke flashmla_kv on an H100 (2026-12-08: FlashMLA's ``num_splits must have shape
    (b+1)``, the schedule planned for the padded rows) and let flashmla_sparse and the Triton
    kernel drop their ``topk_length`` (rows differ: full width). Except on SGLang's unfused
    RAGGED path (torch top-k, fp8 KV under flashmla_sparse or triton_sparse_mla), which cannot
    take padded rows: ``forward_extend`` pads the top-k to the query rows
    (``_pad_topk_indices``), then adds ``topk_indices_offset``, built for the logical rows, and
    the shapes differ (a bug of SGLang 0.5.23 there, dsa_backend.py ``forward_extend``); those
    configurations get the logical rows, as before.
    """
    # fmt: off
    from sglang.srt.layers.cp.base import get_cp_strategy
    from sglang.srt.layers.radix_attention import RadixAttention

    dev, strategy, n = dep.device, get_cp_strategy(), len(mine)
    rows = kv.shape[0]  # the rank's physical rows (n without CP)
    assert rows >= n, (rows, n)
    if not backend.use_fused_topk and (
        backend.get_topk_transform_method(fb.forward_mode).name == "RAGGED"
    ):
        rows = n  # SGLang's unfused RAGGED path takes no padded rows (see above)
    if keys is not None:
        idx_heads, idx_dim = indexer.n_heads, indexer.head_dim
        index_calls = len(logits.calls)
        if cp_on:  # each rank projects its tokens; the CP gather rebuilds the chunk
            keys = strategy.materialize_full_indexer_k_cache(keys, fb)
        indexer._store_index_k_cache(forward_batch=fb, layer_id=layer_id, key=keys,
                                     act_quant=dep.act_quant)
        q = _padded(torch.stack([model.index_query(i, idx_heads, idx_dim) for i in mine]), rows)
        q_fp8, _ = dep.act_quant(q.bfloat16().to(dev).contiguous())
        if dev.type == "cpu":
            q_fp8 = q_fp8.as_subclass(stand_ins.IndexedCPU)
        w = _padded(torch.stack([model.index_weight(i, idx_heads) for i in mine]), rows).to(dev)
        meta = backend.get_indexer_metadata(layer_id, fb)
        topk = indexer._get_topk_ragged(False, fb, layer_id, q_fp8, w, meta)
        topk = topk.as_subclass(torch.Tensor)
        new = logits.calls[index_calls:]
    else:
        new = []
    q = _padded(torch.stack([model.attn_query(i, HEADS) for i in mine]), rows).bfloat16().to(dev)
    layer = RadixAttention(HEADS, 576, 576**-0.5, 1, layer_id, v_head_dim=512)
    before = len(attention.calls)
    if dep.config.backend == "trtllm" and dep.kv_dtype == torch.float8_e4m3fn:
        out = backend.forward_extend(
            q[..., :512], kv[:, None, :512], kv[:, None, :512], layer, fb,
            q_rope=q[..., 512:], k_rope=kv[:, None, 512:], topk_indices=topk,
            cos_sin_cache=_identity_rope(dev), is_neox=True,
        )
    else:
        if cp_on:
            kv = strategy.gather_kv_cache(kv, fb)
        out = backend.forward_extend(
            q[..., :512], kv[:, None, :512], kv[:, None, :512], layer, fb,
            q_rope=q[..., 512:], k_rope=kv[:, None, 512:], topk_indices=topk,
        )
    assert len(attention.calls) == before + 1, (
        f"forward_extend did not reach sparse MLA once (impl {backend.dsa_prefill_impl}, "
        f"use_mha {backend.use_mha}, {len(attention.calls) - before} recorded kernel calls)")
    kv_read, idx = attention.calls[-1]
    record.impl = backend.dsa_prefill_impl
    record.kv_read = f"{str(kv_read.dtype).removeprefix('torch.')} x {kv_read.shape[1]}"
    names, fed = model.identities(kv_read), model.fed_tokens(kv_read)
    reads, feeds = [], []
    for i in range(n):
        cols = idx[i][idx[i] >= 0].tolist()
        reads.append(sorted(names[j] for j in cols))
        feeds.append(sorted((names[j], fed[j]) for j in cols))
    out = out.float().cpu()
    record.layers.append(LayerRecord(
        layer_id, new[0][2] if new else None, (new[0][0], new[0][1]) if new else None,
        topk[:n].cpu().clone(), out.reshape(out.shape[0], -1, 512)[:n], reads, feeds,
    ))
    # fmt: on
    return topk


def _padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x`` with zero rows appended up to ``rows`` (the CP shard's padding, ``pad_local_rows``)."""
    return torch.cat([x, x.new_zeros(rows - x.shape[0], *x.shape[1:])]) if rows > len(x) else x


#: Token ids of the marker prompts: ``content id * TOKEN_BASE + position``. They only travel
#: through SGLang's shift and the CP split, never through an embedding table.
TOKEN_BASE = 4096


def token_id(tok: model.Token) -> int:
    return tok[0] * TOKEN_BASE + tok[1]


def next_token(row: BatchRow) -> model.Token:
    """The token after ``row``'s chunk: the next prompt token, or the one the target sampled
    (the suite's prompts continue, so both are the content's token at ``seq``)."""
    return (row.req.content(row.seq), row.seq)


class _MarkerNextN:
    """GLM-5.1's NextN model (``GlmMoeDsaForCausalLMNextN``) as the draft runner drives it, its
    weights reduced to markers: the embedding of a token id is the id, the target's hidden state
    of a position names it (content id, position), and ``eh_proj`` plus the decoder layer's
    projections become :func:`_skv_backend_model.draft_kv_row` and friends of the pair; the
    layer's Indexer and attention are SGLang's (``step``). Its logits processor keeps each
    request's last hidden state (``CaptureHiddenMode.LAST``) beside constant logits."""

    capture_aux_hidden_states = False
    lm_head = None
    pp_group = SimpleNamespace(is_last_rank=True)

    def __init__(self, step: Any) -> None:
        self._step = step
        self.model = self._body  # DeepseekModelNextN's forward, as the CP runner calls it

    def get_input_embeddings(self) -> Any:
        return lambda input_ids: input_ids.to(torch.float64)[:, None]

    def _body(self, input_ids, positions, forward_batch, input_embeds=None, **_):
        hidden = forward_batch.spec_info.hidden_states
        self._step(forward_batch, input_embeds, hidden)
        return hidden

    def forward(self, input_ids, positions, forward_batch, **_):  # CP off: the whole batch
        hidden = self._body(input_ids, positions, forward_batch,
                            self.get_input_embeddings()(input_ids))  # fmt: skip
        return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)

    def logits_processor(self, input_ids, hidden_states, lm_head, forward_batch, *_, **__):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        last = torch.cumsum(forward_batch.extend_seq_lens.long(), 0) - 1
        logits = torch.zeros(last.shape[0], 8, device=hidden_states.device)
        return LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden_states[last])


class DraftRunner:
    """EAGLE's draft ``ModelRunner`` as far as ``ForwardBatch.init_new`` and
    ``EagerRunner._execute_extend`` read one (``_skv_backend_stand_ins.REPLACEMENTS``): the
    draft pool, its backend, SGLang's own ``KVIndexTranslator`` over them, the marker NextN;
    :meth:`forward` is ``ModelRunner.forward``'s eager extend path."""

    is_draft_worker = True
    is_generation = True
    lora_manager = None
    device_timer = None
    canary_manager = None
    prefill_attention_backend_str = "dsa"

    def __init__(self, dep: Deployment, side: Side, req_to_token: Any, step: Any) -> None:
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
        from sglang.srt.runtime_context import get_spec
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.device, self.model_config = dep.device, dep.model_config
        self.attn_backend, self.token_to_kv_pool = side.draft_backend, side.draft_pool
        self.req_to_token_pool = req_to_token
        self.spec_algorithm = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
        self.ngram_embedding_manager = SimpleNamespace(enabled=False)
        self.kv_index_translator = KVIndexTranslator(
            req_to_token=req_to_token.req_to_token, token_to_kv_pool_allocator=None,
            token_to_kv_pool=side.draft_pool, page_size=P, device=dep.device,
            is_draft_worker=True,
        )  # fmt: skip
        self.model = _MarkerNextN(step)

    def _pp_kwargs(self, pp_proxy_tensors: Any) -> dict:
        return {}

    def _extend_forward_kwargs(self, forward_batch: Any, pp_proxy_tensors: Any) -> dict:
        from sglang.srt.model_executor.model_runner import ModelRunner

        return ModelRunner._extend_forward_kwargs(self, forward_batch, pp_proxy_tensors)

    def forward(self, forward_batch: Any) -> Any:
        from sglang.srt.environ import envs
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
        from sglang.srt.model_executor.model_runner import ModelRunnerOutput
        from sglang.srt.model_executor.runner.eager_runner import EagerRunner

        eager = EagerRunner.__new__(EagerRunner)  # its __init__ sizes a server's input buffers
        eager.model_runner, eager.enable_pdmux = self, False
        with (
            forward_context(ForwardContext(attn_backend=self.attn_backend),
                            forward_batch=forward_batch),
            envs.SGLANG_EAGER_INPUT_NO_COPY.override(True),  # no static buffers to copy into
        ):  # fmt: skip
            out = eager._execute_extend(forward_batch)
        return ModelRunnerOutput(logits_output=out, can_run_graph=False)


def schedule_batch(rows: Sequence[BatchRow], req_to_token: torch.Tensor, device: torch.device,
                   chunked: str | None) -> tuple:  # fmt: skip
    """The scheduler's ``ScheduleBatch`` of an EXTEND step (what ``prepare_for_extend`` leaves:
    prompt ids, lengths, rows, ``out_cache_loc``), the target's hidden states (every token of
    the batch, as the target's CP gather leaves them: each names its (content id, position))
    and its next token ids. ``chunked``: the request whose prompt continues in a later chunk
    (SGLang's ``chunked_req``): its next id is the next prompt token, while the target's
    sampled one, given as ``next_token_ids``, names position ``TOKEN_BASE - 1``."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    i64 = torch.int64
    reqs, chunked_req, chunked_next = [], None, None
    for r in rows:
        req = Req(r.req.name, "", [token_id((r.req.content(p), p)) for p in range(r.seq)],
                  SamplingParams())  # fmt: skip
        req.extend_end = r.seq
        reqs.append(req)
        if r.req.name == chunked:
            chunked_req, chunked_next = req, token_id(next_token(r))
    toks = model.chunk(rows)
    seq = [r.seq for r in rows]
    batch = ScheduleBatch(
        reqs=reqs, forward_mode=ForwardMode.EXTEND,
        spec_algorithm=SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm),
        input_ids=torch.tensor([token_id((r.req.content(p), p)) for r, p in toks], dtype=i64,
                               device=device),
        req_pool_indices=torch.tensor([r.req.row for r in rows], dtype=i64, device=device),
        seq_lens=torch.tensor(seq, dtype=i64, device=device),
        seq_lens_cpu=torch.tensor(seq, dtype=i64), seq_lens_sum=sum(seq),
        extend_lens=[r.extend for r in rows], prefix_lens=[r.prefix for r in rows],
        extend_logprob_start_lens=[r.extend for r in rows], extend_num_tokens=len(toks),
        out_cache_loc=torch.cat([req_to_token[r.req.row, r.prefix : r.seq] for r in rows]).to(
            device=device, dtype=i64),
        chunked_req=chunked_req, chunked_req_next_prompt_token=chunked_next,
    )  # fmt: skip
    hidden = torch.tensor([[r.req.content(p), p] for r, p in toks], dtype=torch.float64,
                          device=device)  # fmt: skip
    sampled = [token_id((r.req.content(r.seq), TOKEN_BASE - 1) if r.req.name == chunked
                        else next_token(r)) for r in rows]  # fmt: skip
    return batch, hidden, torch.tensor(sampled, dtype=i64, device=device)


def run_draft_extend(dep: Deployment, side: Side, rows: Sequence[BatchRow], req_to_token: Any,
                     attention: stand_ins.AttentionCalls,
                     chunked: str | None = None) -> ForwardRecord:  # fmt: skip
    """EAGLE's prefill draft of ``rows`` on ``side``'s draft pool, through SGLang's own
    ``EagleDraftWorker._draft_extend_for_prefill``: the input ids shifted by one per request
    (the tail from the next token ids, or the next prompt token of ``chunked``), the target's
    hidden states, ``ForwardBatch.init_new`` (its own ``KVLocPlan``), then the draft runner's
    eager extend (:class:`DraftRunner`): SGLang's CP split of the inputs and of the target
    hidden states, ``init_forward_metadata`` on the draft backend (the shared-KV plan), the
    NextN layer, the gather after forward, then SGLang's draft probabilities and top-1.

    The worker is built without its ``__init__`` (which loads the draft model), as SGLang's own
    attention harnesses do: the fields ``_draft_extend_for_prefill`` reads are set from the
    resolved arguments, and ``_init_dsa_index_share_state`` (SGLang's) derives the rest.
    """
    from sglang.srt.layers.cp.base import get_cp_strategy
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    dev = dep.device
    toks = model.chunk(rows)
    record = ForwardRecord([])
    logits = stand_ins.LogitsCalls()
    backend, indexer = side.draft_backend, side.draft_indexer

    def step(fb: Any, embeds: torch.Tensor, hidden: torch.Tensor) -> None:
        cp_on = getattr(fb, "attn_cp_metadata", None) is not None
        local = (get_cp_strategy().shard_local_tokens(torch.arange(len(toks))).tolist()
                 if cp_on else list(range(len(toks))))  # fmt: skip
        n = len(local)
        record.rows = [toks[t] for t in local]
        record.method = backend.get_topk_transform_method(fb.forward_mode).name
        record.topk_is_slots = backend.use_fused_topk and record.method == "PAGED"
        mine = [(int(c), int(p), LAYERS) for c, p in hidden[:n].tolist()]
        fed = [divmod(int(t), TOKEN_BASE) for t in embeds[:n, 0].tolist()]
        keys = torch.zeros(embeds.shape[0], indexer.head_dim, dtype=torch.bfloat16, device=dev)
        kv = torch.zeros(embeds.shape[0], 576, dtype=torch.bfloat16, device=dev)
        if n:
            keys[:n] = torch.stack([model.index_key(i, indexer.head_dim) for i in mine]).bfloat16()
            kv[:n] = torch.stack([model.draft_kv_row(i, t) for i, t in zip(mine, fed, strict=True)])
        _layer(dep, backend, indexer, fb, LAYERS, mine, keys, kv, None, cp_on, record, logits,
               attention)  # fmt: skip

    spec = get_spec()
    worker = EagleDraftWorker.__new__(EagleDraftWorker)
    worker.device, worker.topk = dev, spec.speculative_eagle_topk
    worker.speculative_num_steps = spec.speculative_num_steps
    worker.speculative_num_draft_tokens = spec.speculative_num_draft_tokens
    worker.speculative_algorithm = SpeculativeAlgorithm.from_string(spec.speculative_algorithm)
    worker.draft_runner = DraftRunner(dep, side, req_to_token, step)
    worker._init_dsa_index_share_state()
    worker.dsa_extend_topk_buf = None
    batch, hidden, next_ids = schedule_batch(rows, req_to_token.req_to_token, dev, chunked)
    with logits.recording():
        draft_input = worker._draft_extend_for_prefill(batch, hidden, next_ids)
    assert len(record.layers) == 1, "the draft forward did not reach its layer"
    last = [[r.req.content(r.seq - 1), r.seq - 1] for r in rows]
    assert draft_input.hidden_states.long().tolist() == last, "the draft's hidden states"
    plan = getattr(side.draft_pool, "cpkv_forward", None)
    record.lookups = None if plan is None else len(plan._cache)
    return record


def compare(ours: ForwardRecord, ref: ForwardRecord, topk: int) -> list[str]:
    """Every difference between the two sides, and every break of the causal rule (ours)."""
    bad: list[str] = []
    names = [(r.req.name, p) for r, p in ours.rows]
    assert names == [(r.req.name, p) for r, p in ref.rows]
    for a, b in zip(ours.layers, ref.layers, strict=True):
        where = f"layer {a.layer}"
        # fused PAGED top-k: slots of each pool, so their rows (``reads``, below) and which
        # entries are padding are compared, not the slots
        topk_a, topk_b = (a.topk >= 0, b.topk >= 0) if ours.topk_is_slots else (a.topk, b.topk)
        for what, x, y in (("indexer logits", a.logits, b.logits), ("top-k", topk_a, topk_b),
                           ("attention output", a.out, b.out)):  # fmt: skip
            if (x is None) != (y is None) or (x is not None and not _rows_equal(x, y)):
                rows = _diff_rows(x, y)
                bad.append(f"{where}: {what} differs at {[names[i] for i in rows[:4]]} "
                           f"({len(rows)} rows)")  # fmt: skip
        if a.index_rows is not None and not all(
            torch.equal(u, v) for u, v in zip(a.index_rows, b.index_rows, strict=True)
        ):
            bad.append(f"{where}: indexer key rows read differ")
        draft = a.layer >= LAYERS
        for i, feeds in enumerate(a.feeds):
            wrong = [(ident, tok) for ident, tok in feeds
                     if tok != ((ident[0], ident[1] + 1) if draft else None)]  # fmt: skip
            if wrong:
                bad.append(f"{where}: {names[i]} read rows fed other tokens: {wrong[:2]} (a "
                           f"draft row of position p is fed the token at p + 1)")  # fmt: skip
        for i, (row, pos) in enumerate(ours.rows):
            allowed = {model.identity(row, p, a.layer) for p in range(pos + 1)}
            got = set(a.reads[i])
            if got - allowed:
                bad.append(f"{where}: {names[i]} read {sorted(got - allowed)[:3]} (not its own "
                           f"causal rows)")  # fmt: skip
            elif topk >= pos + 1 and got != allowed:
                bad.append(f"{where}: {names[i]} read {len(got)} of its {pos + 1} causal rows")
            if a.reads[i] != b.reads[i]:
                bad.append(f"{where}: {names[i]} read other rows than over the replica")
    return bad


def _rows_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.shape == y.shape and torch.equal(x, y)


def _diff_rows(x: torch.Tensor | None, y: torch.Tensor | None) -> list[int]:
    if x is None or y is None or x.shape != y.shape:
        return [0]
    ne = (x != y) & ~(torch.isnan(x) & torch.isnan(y)) if x.is_floating_point() else x != y
    return ne.reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()
