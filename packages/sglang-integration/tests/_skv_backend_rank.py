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


@dataclass(frozen=True)
class Config:
    """One served configuration: prefill backend, KV dtype and indexer top-k."""

    name: str
    backend: str
    kv_dtype: str  # "bfloat16" | "fp8_e4m3"
    index_topk: int
    #: GLM-5.1's query heads replaced by this count (0: the model's 64), for a CP size whose
    #: attention TP must stay 1 (SGLang allows CP on one node only: TP <= 8)
    query_heads: int = 0

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
        return [
            "--model-path", model_path, "--tp", str(cp * self.attn_tp), "--enable-prefill-cp",
            "--attn-cp-size", str(cp), "--cp-strategy", "interleave",
            "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake",
            "--kv-cache-dtype", self.kv_dtype, "--dsa-prefill-backend", self.backend,
            "--dsa-decode-backend", decode, "--dsa-topk-backend", "torch",
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
            "--speculative-dsa-topk-backend", "torch",
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


@dataclass
class ForwardRecord:
    rows: list[tuple[BatchRow, int]]  # the rank's query rows: (batch row, position)
    layers: list[LayerRecord] = field(default_factory=list)
    method: str = ""
    #: cpkv's side: how many lookups the forward's plan computed and cached (one per distinct
    #: table SGLang passed, whatever the layer count); None on the replica
    lookups: int | None = None


class Deployment:
    """A rank's deployment of one :class:`Config` at one CP size (see the module docstring)."""

    def __init__(self, config: Config, cp: int, rank: int, group: Any, device: torch.device,
                 model_path: str, capability: tuple[int, int]) -> None:  # fmt: skip
        from sglang.srt.configs.model_config import ModelConfig

        self.config, self.cp, self.rank, self.group = config, cp, rank, group
        self.device, self.capability = device, capability
        self.args = resolve(config, cp, model_path, capability)
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
        from sglang.srt.runtime_context import SpawnRanks, create_context, get_parallel, use_context

        saved = cp_base._STRATEGY
        try:
            with self._emulated():
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

    def build(self, req_to_token: Any, *, replica: bool = True,
              max_requests: int = MAX_REQUESTS) -> dict[str, Side]:  # fmt: skip
        """Both sides (or cpkv's alone), on fresh pools admitting ``max_requests`` per batch."""
        from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
        from sglang.srt.mem_cache.page_interleave import PageShardSpec

        n = self.cp
        spec = PageShardSpec(shard_rank=self.rank, shard_size=n, page_size=P,
                             max_prefix_tokens=GATHER_PAGES_PER_RANK * n * P,
                             chunk_tokens=WRITE_PAGES * P)  # fmt: skip
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
        return backend

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
                attention: stand_ins.AttentionCalls, *, draft: bool) -> ForwardRecord:  # fmt: skip
    """One extend forward of ``rows`` on ``side`` (target layers, or the draft's one layer)."""
    from sglang.srt.layers.cp.base import get_cp_strategy
    from sglang.srt.layers.cp.utils import is_cp_active, prepare_cp_forward
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    dev = dep.device
    backend = side.draft_backend if draft else side.backend
    indexer = side.draft_indexer if draft else side.indexer
    layers = [(LAYERS, False)] if draft else list(enumerate(SKIP_TOPK))
    fb = forward_batch(rows, req_to_token.req_to_token.cpu(), dev)
    toks = model.chunk(rows)
    cp_on = is_cp_active(fb)
    if cp_on:
        prepare_cp_forward(fb)
    strategy = get_cp_strategy()
    local = (strategy.shard_local_tokens(torch.arange(len(toks), device=dev)).tolist()
             if cp_on else list(range(len(toks))))  # fmt: skip
    record = ForwardRecord([toks[t] for t in local])
    idx_heads, idx_dim = indexer.n_heads, indexer.head_dim
    logits = stand_ins.LogitsCalls()
    with forward_context(ForwardContext(attn_backend=backend)), logits.recording():
        backend.init_forward_metadata(fb)
        record.method = backend.get_topk_transform_method(fb.forward_mode).name
        topk = None
        for layer_id, shares in layers:
            ident = [model.identity(r, p, layer_id) for r, p in toks]
            mine = [ident[t] for t in local]
            index_calls = len(logits.calls)
            if not shares:
                keys = torch.stack([model.index_key(i, idx_dim) for i in ident]).bfloat16().to(dev)
                if cp_on:  # each rank projects its tokens; the CP gather rebuilds the chunk
                    keys = strategy.materialize_full_indexer_k_cache(
                        strategy.shard_hidden_states(keys, fb), fb)  # fmt: skip
                indexer._store_index_k_cache(forward_batch=fb, layer_id=layer_id, key=keys,
                                             act_quant=dep.act_quant)  # fmt: skip
                q = torch.stack([model.index_query(i, idx_heads, idx_dim) for i in mine])
                q_fp8, _ = dep.act_quant(q.bfloat16().to(dev).contiguous())
                if dev.type == "cpu":
                    q_fp8 = q_fp8.as_subclass(stand_ins.IndexedCPU)
                w = torch.stack([model.index_weight(i, idx_heads) for i in mine]).to(dev)
                meta = backend.get_indexer_metadata(layer_id, fb)
                topk = indexer._get_topk_ragged(False, fb, layer_id, q_fp8, w, meta)
                topk = topk.as_subclass(torch.Tensor)
            kv = torch.stack([model.kv_row(i) for i in ident]).to(dev)
            if cp_on:
                kv = strategy.gather_kv_cache(strategy.shard_hidden_states(kv, fb), fb)
            q = torch.stack([model.attn_query(i, HEADS) for i in mine]).bfloat16().to(dev)
            layer = RadixAttention(HEADS, 576, 576**-0.5, 1, layer_id, v_head_dim=512)
            before = len(attention.calls)
            out = backend.forward_extend(
                q[..., :512], kv[:, None, :512], kv[:, None, :512], layer, fb,
                q_rope=q[..., 512:], k_rope=kv[:, None, 512:], topk_indices=topk,
            )  # fmt: skip
            assert len(attention.calls) == before + 1, "forward_extend did not reach sparse MLA"
            kv_read, idx = attention.calls[-1]
            names = model.identities(kv_read)
            reads = [sorted(names[j] for j in idx[i][idx[i] >= 0].tolist())
                     for i in range(len(local))]  # fmt: skip
            new = logits.calls[index_calls:] if not shares else []
            record.layers.append(LayerRecord(
                layer_id, new[0][2] if new else None, (new[0][0], new[0][1]) if new else None,
                topk[: len(local)].cpu().clone(), out.float().cpu().reshape(len(local), -1, 512),
                reads,
            ))  # fmt: skip
    plan = getattr(side.draft_pool if draft else side.pool, "cpkv_forward", None)
    record.lookups = None if plan is None else len(plan._cache)
    return record


def compare(ours: ForwardRecord, ref: ForwardRecord, topk: int) -> list[str]:
    """Every difference between the two sides, and every break of the causal rule (ours)."""
    bad: list[str] = []
    names = [(r.req.name, p) for r, p in ours.rows]
    assert names == [(r.req.name, p) for r, p in ref.rows]
    for a, b in zip(ours.layers, ref.layers, strict=True):
        where = f"layer {a.layer}"
        for what, x, y in (("indexer logits", a.logits, b.logits), ("top-k", a.topk, b.topk),
                           ("attention output", a.out, b.out)):  # fmt: skip
            if (x is None) != (y is None) or (x is not None and not _rows_equal(x, y)):
                rows = _diff_rows(x, y)
                bad.append(f"{where}: {what} differs at {[names[i] for i in rows[:4]]} "
                           f"({len(rows)} rows)")  # fmt: skip
        if a.index_rows is not None and not all(
            torch.equal(u, v) for u, v in zip(a.index_rows, b.index_rows, strict=True)
        ):
            bad.append(f"{where}: indexer key rows read differ")
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
