"""Run SGLang 0.5.23's DSA prefill for a batch, rank by rank, on a CPU; record what queries read.

What runs is SGLang's own code: the server arguments resolved as ``cpkv-serve`` resolves them
(plugin active), each rank's runtime context built by ``create_context`` from the launcher's rank
bundle, ``InterleaveCPStrategy`` (``build_metadata`` through ``prepare_cp_forward``,
``shard_per_request``, ``shard_local_tokens``, ``shard_hidden_states``, ``gather_kv_cache``),
``DeepseekSparseAttnBackend`` (``__init__``, ``init_forward_metadata``, ``get_indexer_metadata``,
``forward_extend``, ``prepare_mtp_seed_indices``), ``DSAIndexerMetadata.topk_transform`` with its
top-k backend glue, the ``DSATokenToKVPool`` (packed fp8 rows) and the ``ReqToTokenPool``. The
ranks run one after another in this process; each builds its own pools, as each GPU holds a full
KV replica. ``_dsa_stand_ins.REPLACEMENTS`` lists everything else, each standing in for something
that needs CUDA or NCCL.

Inputs are markers, not text: every token ``(content id, position)`` has its own deterministic
latent KV, query and indexer vectors, and its KV row carries the id and position in the bf16 RoPE
part of the row (stored unquantised, so they survive the fp8 pool). A row the attention kernel
reads therefore names the token it came from. The indexer logits are the dot products of those
indexer vectors (the real indexer's fp8 MQA-logits kernel needs DeepGEMM); GLM-5.1's top-k of
2048 exceeds every sequence here, so each query selects every causal position of its request.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import _sglang_env as env
import torch
from _dsa_stand_ins import InProcessCPGroup, SparseMLA
from _sglang_env import resolved

PAGE = 64
#: Query heads of the test layer. The model has 64 per rank at attention TP 1; the backend pads
#: any count dividing 128 to 128 for FlashMLA, and every head reads the same rows.
HEADS = 8
D_NOPE, D_ROPE, D_INDEX = 512, 64, 16
#: Where a KV row's own identity is written, inside the bf16 RoPE part.
MARK_ID, MARK_PAGE, MARK_SLOT = D_NOPE, D_NOPE + 1, D_NOPE + 2


@dataclass(frozen=True)
class Req:
    """One request of a batch.

    Attributes:
        uid: content id; a request keeps it at every batch size.
        extend: tokens computed in this forward.
        prefix: tokens already in the pool.
        prefix_of: uid whose pool pages (and content) the prefix is, for a radix hit on another
            request's pages; None = the request's own earlier pages.
    """

    uid: int
    extend: int
    prefix: int = 0
    prefix_of: int | None = None

    @property
    def seq(self) -> int:
        return self.prefix + self.extend

    def content(self, pos: int) -> int:
        """Content id of position ``pos`` (the prefix owner's for a shared prefix)."""
        return self.prefix_of if self.prefix_of is not None and pos < self.prefix else self.uid


@dataclass
class RankRun:
    """What one CP rank built and read.

    Attributes:
        offsets: SGLang's ``topk_indices_offset`` (None when not built).
        kept: batch indices of the requests with a row on this rank.
        rows: ``(batch index, position)`` of each logical query row.
        reads: per row, the ``(content id, position)`` of every KV row attention read.
        out: per row, the attention output ``[H, 512]`` (float32).
        seeds: per row, pool slots ``prepare_mtp_seed_indices`` exports (fused RAGGED only).
        method: the top-k transform the backend chose for this batch (``"RAGGED"``/``"PAGED"``).
        impl: the prefill implementation it chose (``flashmla_auto`` resolves per batch).
        packed_fp8: the pool stores packed fp8 rows (``dsa_kv_cache_store_fp8``).
    """

    offsets: list[int] | None
    kept: list[int]
    rows: list[tuple[int, int]]
    reads: list[list[tuple[int, int]]] = field(default_factory=list)
    out: list[torch.Tensor] = field(default_factory=list)
    seeds: list[list[int]] = field(default_factory=list)
    method: str = ""
    impl: str = ""
    packed_fp8: bool = False


def expected_reads(req: Req, pos: int) -> list[tuple[int, int]]:
    """What a query of ``req`` at sequence position ``pos`` must read: its own causal tokens."""
    return [(req.content(p), p) for p in range(pos + 1)]


def _vec(uid: int, pos: int, kind: int, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed((uid * 1_000_003 + pos) * 8 + kind)
    return torch.randn(shape, generator=g)


@functools.cache
def kv_row(uid: int, pos: int) -> torch.Tensor:
    """The latent KV row ``[576]`` bf16 of token ``(uid, pos)``, identity in its RoPE part."""
    row = _vec(uid, pos, 0, (D_NOPE + D_ROPE,)) * 0.5
    row[MARK_ID], row[MARK_PAGE], row[MARK_SLOT] = uid + 1, pos // PAGE, pos % PAGE
    return row.to(torch.bfloat16)


def row_identities(kv: torch.Tensor) -> list[tuple[int, int]]:
    """``(uid, pos)`` that :func:`kv_row` wrote into each row of ``kv [S, 576]``."""
    m = kv[:, MARK_ID : MARK_SLOT + 1].float().long()
    return list(zip((m[:, 0] - 1).tolist(), (m[:, 1] * PAGE + m[:, 2]).tolist(), strict=True))


@functools.cache
def q_row(uid: int, pos: int, heads: int) -> torch.Tensor:
    """Absorbed query ``[H, 576]`` (float32; bf16 once stacked) of token ``(uid, pos)``, blind
    to the identity marks."""
    q = _vec(uid, pos, 1, (heads, D_NOPE + D_ROPE))
    q[:, MARK_ID : MARK_SLOT + 1] = 0
    return q


@functools.cache
def index_vec(uid: int, pos: int, kind: int) -> torch.Tensor:
    return _vec(uid, pos, 2 + kind, (D_INDEX,))


#: The RAGGED configuration: fp8 KV in the packed FlashMLA layout, flashmla_sparse prefill.
FLASHMLA_SPARSE_FP8 = ("--kv-cache-dtype", "fp8_e4m3", "--dsa-prefill-backend", "flashmla_sparse",
                       "--dsa-decode-backend", "flashmla_kv")  # fmt: skip


def server_args(cp: int, capability: tuple[int, int], *flags: str, tp: int | None = None) -> Any:
    """GLM-5.1-FP8 on ``tp`` GPUs (default ``cp``) with ``flags``, resolved as ``cpkv-serve``
    resolves it (plugin active); ``cp`` 1 leaves prefill CP off (the batch-size-1 reference)."""
    argv = env.glm51_argv(*flags)
    argv[argv.index("--tp") + 1] = str(tp or cp)
    if cp > 1:
        argv += ["--enable-prefill-cp", "--attn-cp-size", str(cp), "--cp-strategy", "interleave"]
    return env.resolve(argv, capability)


def upstream_init_forward_metadata() -> Callable[[Any, Any], None]:
    """SGLang's ``init_forward_metadata`` itself, with any plugin hook peeled off."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    return inspect.unwrap(DeepseekSparseAttnBackend.__dict__["init_forward_metadata"])


def hooked_init_forward_metadata() -> Callable[[Any, Any], None]:
    """``init_forward_metadata`` with the plugin's hooks applied (``load_plugins()`` done)."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    fn = DeepseekSparseAttnBackend.init_forward_metadata
    assert fn is not upstream_init_forward_metadata(), "the plugin's hooks are not applied"
    return fn


@contextlib.contextmanager
def rank_context(args: Any, capability: tuple[int, int], rank: int) -> Iterator[Any]:
    """Rank ``rank``'s runtime context (SGLang's ``create_context``) with its CP strategy."""
    import sglang.srt.layers.cp.base as cp_base
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang_cpkv.serve._dry_run import emulated_gpu

    cp = resolved(args, "attn_cp_size") if resolved(args, "enable_prefill_cp") else 1
    world_rank = rank * (resolved(args, "tp_size") // cp)  # attention TP rank 0 of CP rank `rank`
    saved = cp_base._STRATEGY
    try:
        with emulated_gpu(capability):
            ctx = create_context(args, role="test", ranks=SpawnRanks(world_rank=world_rank))
            with use_context(ctx):
                parallel = ctx.parallel
                assert parallel.attn_cp_rank == rank
                cp_base.init_cp_strategy(
                    enable_prefill_cp=parallel.enable_prefill_cp,
                    cp_size=parallel.attn_cp_size,
                    cp_strategy=parallel.cp_strategy,
                )
                yield ctx
    finally:
        cp_base._STRATEGY = saved


def _runner(model_config: Any, kv_dtype: torch.dtype, reqs: Sequence[Req]) -> Any:
    from types import SimpleNamespace

    from sglang.srt.configs.model_config import get_dsa_index_head_dim
    from sglang.srt.mem_cache.kv_cache_configurator import calculate_mla_kv_cache_dim
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, ReqToTokenPool

    pages = 2 + sum(-(-r.seq // PAGE) for r in reqs)
    pool = DSATokenToKVPool(
        pages * PAGE, page_size=PAGE, dtype=kv_dtype, kv_lora_rank=model_config.kv_lora_rank,
        qk_rope_head_dim=model_config.qk_rope_head_dim, layer_num=1, device="cpu",
        kv_cache_dim=calculate_mla_kv_cache_dim(model_config=model_config, kv_cache_dtype=kv_dtype),
        enable_memory_saver=False, index_head_dim=get_dsa_index_head_dim(model_config.hf_config),
    )  # fmt: skip
    max_len = max(r.seq for r in reqs) + PAGE
    return SimpleNamespace(
        device="cpu", page_size=PAGE, model_config=model_config, token_to_kv_pool=pool,
        req_to_token_pool=ReqToTokenPool(size=len(reqs), max_context_len=max_len, device="cpu",
                                         enable_memory_saver=False),
        hisparse_coordinator=None, is_draft_worker=False, max_running_requests=len(reqs),
        kv_cache_dtype=kv_dtype,
    )  # fmt: skip


def pool_locs(reqs: Sequence[Req]) -> list[list[int]]:
    """Pool slot of every position of every request, pages in batch order (page 0 left free).

    A ``prefix_of`` request reuses its owner's slots for its prefix, as a radix hit on committed
    pages does: the hit covers whole pages and lies inside the owner's own prefix.
    """
    owner = {r.uid: r for r in reqs}
    index = {r.uid: b for b, r in enumerate(reqs)}
    out, page = [], 1
    for r in reqs:
        shared = 0 if r.prefix_of is None else r.prefix
        if r.prefix_of is not None and (shared % PAGE or shared > owner[r.prefix_of].prefix):
            raise ValueError(
                f"request {r.uid}: a radix hit covers whole committed pages of request "
                f"{r.prefix_of}, got {shared} tokens"
            )
        n_new = -(-(r.seq - shared) // PAGE)
        out.append([p * PAGE + s for p in range(page, page + n_new) for s in range(PAGE)])
        page += n_new
    for b, r in enumerate(reqs):
        shared = [] if r.prefix_of is None else out[index[r.prefix_of]][: r.prefix]
        out[b] = shared + out[b][: r.seq - len(shared)]
    return out


class DsaPrefill:
    """One resolved deployment; :meth:`run` pushes a batch through every rank."""

    def __init__(self, args: Any, capability: tuple[int, int]) -> None:
        from sglang.srt.configs.model_config import ModelConfig, get_dsa_index_topk
        from sglang_cpkv.serve._dry_run import emulated_gpu

        self.args, self.capability = args, capability
        self.cp = resolved(args, "attn_cp_size") if resolved(args, "enable_prefill_cp") else 1
        with emulated_gpu(capability):
            self.model_config = ModelConfig.from_server_args(args)
        self.heads = HEADS
        fp8 = resolved(args, "kv_cache_dtype") == "fp8_e4m3"
        self.kv_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.topk = get_dsa_index_topk(self.model_config.hf_config)

    def _batch(self, runner: Any, reqs: Sequence[Req], locs: list[list[int]], pad: int) -> Any:
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        i32 = torch.int32
        table = runner.req_to_token_pool.req_to_token
        out_loc, positions = [], []
        for b, (r, loc) in enumerate(zip(reqs, locs, strict=True)):
            table[b + 1, : r.seq] = torch.tensor(loc, dtype=i32)  # row 0 is SGLang's padding row
            out_loc += loc[r.prefix :]
            positions += range(r.prefix, r.seq)
        fb = ForwardBatch(
            forward_mode=ForwardMode.EXTEND, batch_size=len(reqs),
            input_ids=torch.arange(len(out_loc) + pad),
            req_pool_indices=torch.arange(1, len(reqs) + 1, dtype=i32),
            seq_lens=torch.tensor([r.seq for r in reqs], dtype=i32),
            seq_lens_cpu=torch.tensor([r.seq for r in reqs], dtype=i32),
            out_cache_loc=torch.tensor(out_loc), seq_lens_sum=sum(r.seq for r in reqs),
            positions=torch.tensor(positions),
        )  # fmt: skip
        fb.extend_prefix_lens = torch.tensor([r.prefix for r in reqs], dtype=i32)
        fb.extend_prefix_lens_cpu = [r.prefix for r in reqs]
        fb.extend_seq_lens = torch.tensor([r.extend for r in reqs], dtype=i32)
        fb.extend_seq_lens_cpu = [r.extend for r in reqs]
        fb.extend_num_tokens = len(out_loc)
        return fb

    def run(
        self,
        reqs: Sequence[Req],
        metadata_fn: Callable[[Any, Any], None],
        mla: SparseMLA,
        *,
        forward: bool = True,
        ranks: Sequence[int] | None = None,
        input_pad: int = 0,
    ) -> list[RankRun]:
        """Build metadata (and, with ``forward``, run top-k and attention) on every rank.

        ``input_pad`` appends rows to ``input_ids`` beyond the batch's tokens, as MLP-sync
        padding does under DP attention.
        """
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
        from sglang.srt.layers.cp.base import get_cp_strategy
        from sglang.srt.layers.cp.utils import is_cp_active, prepare_cp_forward
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.runtime_context import get_parallel

        locs = pool_locs(reqs)
        chunk = [(b, p) for b, r in enumerate(reqs) for p in range(r.prefix, r.seq)]
        kv_chunk = torch.stack([kv_row(reqs[b].content(p), p) for b, p in chunk])
        q_chunk = torch.stack([q_row(reqs[b].content(p), p, self.heads) for b, p in chunk]).to(
            torch.bfloat16)  # fmt: skip
        layer = RadixAttention(self.heads, D_NOPE + D_ROPE, (D_NOPE + D_ROPE) ** -0.5, 1, 0,
                               v_head_dim=D_NOPE)  # fmt: skip
        runs = []
        for rank in range(self.cp) if ranks is None else ranks:
            with rank_context(self.args, self.capability, rank):
                runner = _runner(self.model_config, self.kv_dtype, reqs)
                backend = DeepseekSparseAttnBackend(runner)
                backend._is_blackwell = lambda: self.capability[0] in (10, 11, 12)
                for b, r in enumerate(reqs):  # history already in the pool
                    if r.prefix and (r.prefix_of is None or r.prefix_of == r.uid):
                        kv = torch.stack([kv_row(r.content(p), p) for p in range(r.prefix)])
                        loc = torch.tensor(locs[b][: r.prefix])
                        runner.token_to_kv_pool.set_mla_kv_buffer(
                            layer, loc, kv[:, None, :D_NOPE], kv[:, None, D_NOPE:]
                        )
                fb = self._batch(runner, reqs, locs, input_pad)
                cp_on = is_cp_active(fb)
                if cp_on:
                    prepare_cp_forward(fb)
                metadata_fn(backend, fb)
                md = backend.forward_metadata
                local = (get_cp_strategy().shard_local_tokens(torch.arange(len(chunk))).tolist()
                         if cp_on else list(range(len(chunk))))  # fmt: skip
                rows = [chunk[t] for t in local]
                run = RankRun(
                    offsets=None if md.topk_indices_offset is None
                    else md.topk_indices_offset.tolist(),
                    kept=sorted({b for b, _ in rows}), rows=rows,
                    method=backend.get_topk_transform_method(fb.forward_mode).name,
                    impl=backend.dsa_prefill_impl,
                    packed_fp8=runner.token_to_kv_pool.dsa_kv_cache_store_fp8,
                )  # fmt: skip
                runs.append(run)
                if not forward:
                    continue
                topk = self._topk(backend, fb, reqs, run, physical=self._physical(fb, len(rows)))
                if cp_on:
                    strategy = get_cp_strategy()
                    group = InProcessCPGroup(kv_chunk, self.cp, self._physical(fb, len(rows)))
                    with get_parallel().override(attn_cp_group=group):
                        kv = strategy.gather_kv_cache(strategy.shard_hidden_states(kv_chunk, fb),
                                                      fb)  # fmt: skip
                    q = strategy.shard_hidden_states(q_chunk, fb)
                else:
                    kv, q = kv_chunk, q_chunk
                assert torch.equal(kv, kv_chunk), "the gathered KV is not the chunk in token order"
                before = len(mla.calls)
                out = backend.forward_extend(
                    q[..., :D_NOPE], kv[:, None, :D_NOPE], kv[:, None, :D_NOPE], layer, fb,
                    q_rope=q[..., D_NOPE:], k_rope=kv[:, None, D_NOPE:], topk_indices=topk,
                )  # fmt: skip
                assert len(mla.calls) == before + 1, "forward_extend did not reach sparse MLA"
                kv_read, idx = mla.calls[-1]
                names = row_identities(kv_read)
                for i in range(len(rows)):
                    run.reads.append(sorted(names[j] for j in idx[i][idx[i] >= 0].tolist()))
                    run.out.append(out[i].float())
                if backend.use_fused_topk:
                    seeds = backend.prepare_mtp_seed_indices(topk[: len(rows)], ForwardMode.EXTEND)
                    run.seeds = [sorted(s[s >= 0].tolist()) for s in seeds]
        return runs

    @staticmethod
    def _physical(fb: Any, logical: int) -> int:
        from sglang.srt.runtime_context import get_parallel

        md = fb.attn_cp_metadata
        return logical if md is None else md.per_rank_actual_token[get_parallel().attn_cp_rank]

    def _topk(self, backend: Any, fb: Any, reqs: Sequence[Req], run: RankRun, physical: int):
        """The indexer's top-k step: logits over the kept requests' keys, SGLang's transform."""
        meta = backend.get_indexer_metadata(0, fb)
        ks, ke = meta.get_indexer_kvcache_range()
        keys = [(b, p) for b in run.kept for p in range(reqs[b].seq)]
        qi = torch.stack([index_vec(reqs[b].content(p), p, 0) for b, p in run.rows])
        ki = torch.stack([index_vec(reqs[b].content(p), p, 1) for b, p in keys])
        logits = (qi @ ki.T).contiguous()
        start = {b: keys.index((b, 0)) for b in run.kept}
        assert ks.tolist() == [start[b] for b, _ in run.rows], "ks is not each row's key start"
        assert (ke - ks).tolist() == [p + 1 for _, p in run.rows], "ke is not causal"
        result = torch.full((physical, self.topk), -1, dtype=torch.int32)
        result[: len(run.rows)] = meta.topk_transform(logits, self.topk, ks=ks)
        return result
