"""The test doubles of the backend-level shared-KV suite, and the recorders it reads results from.

Everything that maps pages, rows or indices is SGLang's or cpkv's own code, run as shipped:
``init_forward_metadata`` and its CP split (the Triton kernel runs in Triton's interpreter on a
CPU), the indexer's key store and page reads (``SetKAndS``/``GetKAndS``), SGLang's torch top-k
(``--dsa-topk-backend torch``, ``SGLANG_DSA_FUSE_TOPK=0``) and ``transform_index_page_table_
prefill``, or its fused dispatch and the page tables and offsets it hands the fused kernels,
trtllm's page-table padding and fp8 KV gather, EAGLE's ``_draft_extend_for_prefill`` with
``ForwardBatch.init_new`` and the eager runner's CP split, both pools' stores and gathers,
cpkv's plan. :func:`check_originals` asserts that at the start of every run. What stands in
(:data:`REPLACEMENTS`) is math or environment that cannot run without a GPU (the fused top-k
kernels' math on the GPU too: see their row); on the GPU only the rows marked so apply.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from _dsa_stand_ins import SparseMLA, fp8_quantizer, mla_schedule, paged_dequantizer

#: Streaming multiprocessors of an SM100 (B200), for the trtllm scratch sizes on a CPU.
SM100_SMS = 148

#: (what is replaced, why, what runs instead, where: "cpu", "gpu" or "both")
REPLACEMENTS: tuple[tuple[str, str, str, str], ...] = (
    ("the GPU capability and SGLang's platform facts", "no GPU here",
     "an emulated H200 (cpkv-serve --dry-run --gpu sm90's emulated_gpu)", "cpu"),
    ("page_interleave_pool.PyNcclCommunicator (the pool's all-gather)",
     "one GPU cannot host two NCCL ranks; no NCCL on a CPU",
     "GlooCommunicator: all_gather over the shard group's gloo group (through the host for "
     "CUDA tensors)", "both"),
    ("GroupCoordinator.all_gather_into_tensor of the attention-CP group (the CP split's KV and "
     "indexer-key gathers)", "its CUDA path is a custom op over NCCL",
     "the coordinator's own torch.distributed path over gloo (through the host for CUDA "
     "tensors)", "both"),
    ("torch.cuda.current_stream (passed to, and ignored by, the CP gather) and "
     "torch.cuda.is_current_stream_capturing (asked by the Triton sparse-MLA path)", "no CUDA",
     "torch.cpu.current_stream; False (nothing is captured)", "cpu"),
    ("the fp8 quantisers: the indexer's act_quant (Triton) and the packed latent store's "
     "_quantize_k_cache_fast_kernel (Triton)",
     "math only (row i to row i); the interpreter writes other fp8 bytes than a GPU and is slow",
     "torch: per-128 amax scale, e4m3 cast (SGLang's wrappers and byte layout stay)", "cpu"),
    ("the sparse-MLA kernels: FlashMLA's flash_mla_sparse_fwd and flash_mla_with_kvcache "
     "(CUDA), SGLang's Triton sparse_mla_prefill",
     "math on the rows the backend hands them; FlashMLA needs CUDA",
     "torch softmax attention over the listed rows in float64 (packed fp8 rows dequantised "
     "first); on the GPU SGLang's Triton sparse_mla_prefill and FlashMLA's kernels run for real, "
     "only recorded", "cpu"),
    ("dequant_k_cache._dequantize_k_cache_paged_kernel (Triton; RAGGED batches with a prefix "
     "dequantise the rows of SGLang's page_table_1_flattened)",
     "in Triton's interpreter it ran one program per row and 128 columns: 389 of 435 s of a "
     "CP 2 run", "torch with the kernel's contract, out[i] = dequant(cache[table[i]]), held "
     "bitwise equal to the interpreted kernel by test_skv_backend_stand_ins.py", "cpu"),
    ("FlashMLA's get_mla_metadata (flashmla_kv's tile scheduler)", "CUDA only",
     "an empty schedule with num_splits of shape (b + 1) for the b cache_seqlens it is planned "
     "for; the flash_mla_with_kvcache stand-in asserts FlashMLA's rule that b is the kernel's "
     "batch (q's rows), as FlashMLA 1.0.0's decode does (see check_num_splits)", "cpu"),
    ("the indexer's fp8 MQA logits", "DeepGEMM needs a GPU",
     "SGLang's own torch fallback (SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1); DeepGEMM on the GPU",
     "cpu"),
    ("the indexer's 'indexed CUDA device' assert (q_fp8.device.index)", "CPU tensors have none",
     "q_fp8 wrapped so its device reads cpu:0", "cpu"),
    ("dsa_backend._compiled_cat (torch.compile)", "inductor would build C++ per shape",
     "its own function, eager", "both"),
    ("the modules sgl_kernel, sgl_kernel.quantization, sgl_kernel.kvcacheio, sgl_kernel.utils and "
     "IPython (where "
     "not installed)", "the GPU box has neither (sgl-kernel is 1.2 GB); SGLang imports them at "
     "module level on CUDA", "modules whose every function raises when called (IPython.display "
     "a no-op): the DSA path under test calls none of them, and a call would fail loudly", "gpu"),
    ("the indexer's rotary-embedding module, at construction only",
     "its CPU constructor imports vLLM; the suite hands the indexer its keys, never calls it",
     "None while Indexer.__init__ runs", "both"),
    ("the fused top-k kernels (SGLANG_DSA_FUSE_TOPK=1, --dsa-topk-backend sgl-kernel): "
     "sgl_kernel.fast_topk_transform_fused and fast_topk_transform_ragged_fused, and SGLang's "
     "JIT dsv4.topk.topk_transform_ragged_v2 and plan_topk_v2",
     "CUDA only; sgl-kernel's is compiled for k = 2048 alone (the suite's 32 and 256 keep the "
     "top-k below sequences) and the GPU box has no sgl-kernel; the CUDA kernels order what they "
     "select, and pick among scores tied at the k-th, as their threads race, so the two pools "
     "could not be held bitwise",
     "torch (FusedTopK): topk_positions (each row's k best in its window, in order where the "
     "window fits k, as the kernels' naive path) then the kernel's own transform; held to "
     "SGLang's torch top-k and its unfused transforms, ties and -1 padding included, by "
     "test_skv_fused_topk_stand_ins.py. Everything around them (SGLang's dispatch in "
     "DSATopKBackend.topk_transform, the metadata and page tables they read, "
     "_get_fused_topk_page_table, _pad_topk_indices) runs as shipped", "both"),
    ("flashinfer's trtllm_batch_decode_with_kv_cache_mla (trtllm's sparse MLA, SM100)",
     "CUDA (Blackwell) only",
     "torch softmax attention in float64 over the raw fp8 rows block_tables lists (a plain "
     "cast: the raw layout has no scales), the first seq_lens of each row", "cpu"),
    ("flashinfer's rope.mla_rope_quantize_fp8 (trtllm's fused RoPE and fp8 cast of the queries "
     "and of each rank's KV before SGLang's all_gather_dsa_trtllm_fp8_kv)", "CUDA only",
     "torch RoPE from cos_sin_cache[pos] and the fp8 cast; the suite passes the identity "
     "rotation (cos 1, sin 0), so the marks in the RoPE part survive (RoPE turns a query and "
     "the keys it reads by their positions; which rows it reads does not depend on it)", "cpu"),
    ("flashinfer.utils.get_device_sm_count, and the trtllm scratch DeepseekSparseAttnBackend "
     "allocates only under CUDA (workspace, multi-CTA counters)", "both ask CUDA",
     f"an SM100's {SM100_SMS} SMs; the scratch made as __init__ makes it on CUDA, with SGLang's "
     "own make_persistent_multi_ctas_kv_counter_buffer", "cpu"),
    ("EAGLE's draft ModelRunner and the NextN model it runs (GlmMoeDsaForCausalLMNextN)",
     "a real one loads GLM-5.1's weights on a GPU",
     "a runner holding SGLang's own KVIndexTranslator over the draft pool, whose forward is "
     "SGLang's EagerRunner._execute_extend (the CP split of the inputs and of the target hidden "
     "states, init_forward_metadata, the gather after forward), over a marker NextN: the "
     "embedding and eh_proj reduced to marks of the fed token and of the target's hidden state, "
     "the layer's Indexer and DeepseekSparseAttnBackend real; its logits processor keeps each "
     "request's last hidden state and constant logits", "both"),
)  # fmt: skip

#: What the suite runs as shipped: (module, attribute) whose code must come from ``home``.
ORIGINALS: tuple[tuple[str, str, str], ...] = (
    ("sglang.srt.layers.attention.dsa_backend", "transform_index_page_table_prefill", "sglang."),
    ("sglang.srt.layers.attention.dsa.dsa_topk_backend", "_topk_unfused", "sglang."),
    ("sglang.kernels.ops.attention.dsa.cp_split", "_dsa_cp_interleave_q_seqs_kernel", "sglang."),
    ("sglang.srt.layers.attention.dsa.dsa_indexer", "Indexer", "sglang."),
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "sglang_cpkv."),
    ("sglang_cpkv.plugin.shared_kv._pool", "CpkvIndexKeyCache", "sglang_cpkv."),
    ("sglang_cpkv.plugin.shared_kv._pool", "interleave_kept_rows", "sglang_cpkv."),
)  # fmt: skip
#: Methods of our classes that map rows: each must be the one defined in its module.
OUR_METHODS: tuple[tuple[str, str, str], ...] = (
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "translate"),
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "scratch_pages"),
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "write_rows"),
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "persist_rows"),
    ("sglang_cpkv.plugin.shared_kv._forward", "ForwardScratch", "_table_requests"),
    ("sglang_cpkv.plugin.shared_kv._pool", "CpkvIndexKeyCache", "write_targets"),
    ("sglang_cpkv.plugin.shared_kv._pool", "CpkvIndexKeyCache", "_scratch_pages"),
    ("sglang_cpkv.plugin.shared_kv._pool", "CpkvSharedKVPool", "set_mla_kv_buffer"),
)
#: SGLang's methods on the fused top-k, trtllm and draft paths that map rows, pages or indices:
#: each must be the one its module defines (checked like :data:`OUR_METHODS`).
SGLANG_METHODS: tuple[tuple[str, str, str], ...] = (
    ("sglang.srt.layers.attention.dsa.dsa_topk_backend", "DSATopKBackend", "topk_transform"),
    ("sglang.srt.layers.attention.dsa.dsa_indexer_metadata", "DSAIndexerMetadata",
     "topk_transform"),
    ("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend",
     "_get_fused_topk_page_table"),
    ("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend", "_pad_topk_indices"),
    ("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend", "_forward_trtllm"),
    ("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend",
     "_pad_trtllm_sparse_page_table"),
    ("sglang.srt.layers.cp.interleave", "InterleaveCPStrategy", "all_gather_dsa_trtllm_fp8_kv"),
    ("sglang.srt.layers.cp.interleave", "InterleaveCPStrategy", "shard_hidden_states"),
    ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker", "_draft_extend_for_prefill"),
    ("sglang.srt.model_executor.runner.eager_runner", "EagerRunner", "_execute_extend"),
    ("sglang.srt.model_executor.runner.eager_runner", "EagerRunner", "_execute_extend_cp"),
    ("sglang.srt.model_executor.forward_batch_info", "ForwardBatch", "init_new"),
    ("sglang.srt.mem_cache.kv_loc_plan", "KVLocPlan", "bind"),
)  # fmt: skip


def _source_module(obj: Any) -> str:
    fn = getattr(obj, "fn", obj)  # a Triton JITFunction / InterpretedFunction holds .fn
    return getattr(fn, "__module__", "") or ""


#: ``sgl_kernel.utils``: SGLang's Triton attention backend imports ``is_arch_support_pdl`` at module
#: level on CUDA only (``eagle_worker_v2`` imports that backend), so a CPU run never asks for it.
_KERNEL_MODULES = (
    "sgl_kernel",
    "sgl_kernel.quantization",
    "sgl_kernel.kvcacheio",
    "sgl_kernel.utils",
)


def _raising_module(name: str) -> types.ModuleType:
    """An importable module whose every public attribute is a function that raises if called."""
    module = types.ModuleType(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def attribute(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def missing(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"{name}.{attr} called, but {name} is not installed (stand-in)")

        missing.__name__ = missing.__qualname__ = attr
        return missing

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def stub_missing_packages() -> list[str]:
    """Put :data:`REPLACEMENTS`' module stand-ins in ``sys.modules`` for what is not installed
    (before SGLang is imported); returns their names."""
    import importlib.util

    added = []
    if importlib.util.find_spec("sgl_kernel") is None:
        for name in _KERNEL_MODULES:
            sys.modules[name] = _raising_module(name)
            added.append(name)
    if importlib.util.find_spec("IPython") is None:
        display = types.ModuleType("IPython.display")
        display.HTML = display.display = lambda *a, **k: None
        display.__spec__ = importlib.machinery.ModuleSpec("IPython.display", None)
        package = types.ModuleType("IPython")
        package.__path__ = []
        package.__spec__ = importlib.machinery.ModuleSpec("IPython", None, is_package=True)
        package.display, package.get_ipython = display, (lambda: None)
        package.version_info = (0, 0, 0)  # matplotlib reads it, then get_ipython() (None)
        sys.modules.update({"IPython": package, "IPython.display": display})
        added += ["IPython", "IPython.display"]
    return added


def check_originals() -> list[str]:
    """Names of the code the suite must run as shipped but finds replaced (empty: all real)."""
    bad = []
    for module, name, home in ORIGINALS:
        obj = getattr(importlib.import_module(module), name)
        if not _source_module(obj).startswith(home) or hasattr(obj, "__wrapped__"):
            bad.append(f"{module}.{name}")
    for module, cls, name in OUR_METHODS + SGLANG_METHODS:
        owner = getattr(importlib.import_module(module), cls)
        fn = owner.__dict__.get(name)
        fn = getattr(fn, "__func__", fn)  # a classmethod's function
        if fn is None or inspect.getsourcefile(fn) != inspect.getsourcefile(owner):
            bad.append(f"{module}.{cls}.{name}")
    return bad


class GlooCommunicator:
    """Stands in for ``PyNcclCommunicator``: ``all_gather(out, send)`` and ``change_state``."""

    def __init__(self, group, device, cta_policy=None, **_):
        self.group = group

    def change_state(self, enable=None, **_):
        return contextlib.nullcontext()

    def all_gather(self, output_tensor, input_tensor, stream=None, sizes=None):
        gather_through_host(output_tensor, input_tensor, self.group)


def gather_through_host(output: torch.Tensor, input: torch.Tensor, group) -> None:
    """``all_gather_into_tensor`` over a gloo group; CUDA tensors travel through the host."""
    if output.is_cuda:
        host = output.new_empty(output.shape, device="cpu")
        dist.all_gather_into_tensor(host, input.cpu(), group=group)
        output.copy_(host)
        return
    dist.all_gather_into_tensor(output, input, group=group)


def torch_act_quant(x: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None):
    """The indexer's fp8 quantiser in torch: per-``block_size`` amax scale, e4m3 cast."""
    y = x.float().view(*x.shape[:-1], -1, block_size)
    s = y.abs().amax(-1).clamp(min=1e-4) / 448.0
    q = (y / s[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(x.shape)
    return q, s


class IndexedCPU(torch.Tensor):
    """A CPU tensor whose device reads ``cpu:0`` (the indexer asserts an indexed device)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cpu", 0)


def dequantize_packed(rows: torch.Tensor) -> torch.Tensor:
    """Packed fp8 DSA rows ``[N, 656]`` (512 fp8, 4 fp32 scales, 64 bf16) -> ``[N, 576]`` bf16."""
    raw = rows.reshape(rows.shape[0], -1).view(torch.uint8)
    nope = raw[:, :512].view(torch.float8_e4m3fn).float().view(-1, 4, 128)
    scale = raw[:, 512:528].contiguous().view(torch.float32)
    rope = raw[:, 528:656].contiguous().view(torch.bfloat16)
    return torch.cat([(nope * scale[..., None]).view(-1, 512).bfloat16(), rope], dim=1)


class AttentionCalls:
    """Every sparse-MLA call of a forward: ``(kv rows [S, 576], indices [T, K])`` as read.

    Wraps the kernel that runs (the torch stand-in on a CPU; SGLang's Triton kernel and
    FlashMLA's on the GPU) and keeps what the backend handed it, with the per-row valid length
    applied.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.topk = FusedTopK()  # the fused top-k stand-ins, installed with the rest

    def keep(self, kv: torch.Tensor, indices: torch.Tensor, topk_length=None) -> None:
        idx = indices.reshape(indices.shape[0], -1)
        if topk_length is not None:
            cols = torch.arange(idx.shape[1], device=idx.device)[None, :]
            idx = torch.where(cols < topk_length[:, None].to(idx.device), idx, -1)
        self.calls.append((kv.reshape(kv.shape[0], -1).detach().cpu(), idx.detach().cpu()))

    def flash_mla_sparse_fwd(self, mla: Callable[..., Any]) -> Callable[..., Any]:
        def run(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, **kw):
            self.keep(kv, indices, topk_length)
            return mla(q, kv, indices, sm_scale, d_v, attn_sink=attn_sink,
                       topk_length=topk_length, **kw)  # fmt: skip

        return run

    def sparse_mla_prefill(self, kernel: Callable[..., Any]) -> Callable[..., Any]:
        def run(q_all, kv_cache, page_table_1, sm_scale, v_head_dim, topk_length=None, **kw):
            self.keep(kv_cache, page_table_1, topk_length)
            return kernel(q_all, kv_cache, page_table_1, sm_scale, v_head_dim,
                          topk_length=topk_length, **kw)  # fmt: skip

        return run

    def trtllm_sparse_mla(self, mla: SparseMLA) -> Callable[..., Any]:
        """flashinfer's ``trtllm_batch_decode_with_kv_cache_mla`` as the trtllm DSA backend calls
        it (sparse: ``block_tables`` lists token slots of the raw fp8 rows, ``seq_lens`` each
        query's count of valid ones): the torch stand-in on the rows dequantised by a plain
        cast (trtllm's raw layout has no scales; ``bmm1_scale`` carries the softmax scale)."""

        def run(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank,
                qk_rope_head_dim, block_tables, seq_lens, max_seq_len, sparse_mla_top_k=0,
                out=None, bmm1_scale=1.0, bmm2_scale=1.0, **_):  # fmt: skip
            assert sparse_mla_top_k > 0, "the DSA backend calls trtllm's sparse MLA"
            rows = kv_cache.reshape(-1, kv_cache.shape[-1])
            idx = block_tables.reshape(block_tables.shape[0], -1)
            self.keep(rows, idx, seq_lens)
            q = query.reshape(query.shape[0], -1, query.shape[-1]).to(torch.bfloat16)
            o = mla(q, rows.to(torch.bfloat16), idx, bmm1_scale, kv_lora_rank,
                    topk_length=seq_lens)[0]  # fmt: skip
            o = (o.float() * bmm2_scale).to(torch.bfloat16).view(q.shape[0], 1, q.shape[1], -1)
            if out is not None:
                out.copy_(o.view(out.shape))
                return out
            return o

        return run

    def keep_packed(self, k_cache: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """Keep flashmla_kv's read: SGLang's packed fp8 pages (656 bytes a row: 512 fp8, 4 fp32
        scales, 64 bf16), dequantised to ``[S, 576]`` (returned), and the token indices."""
        assert k_cache.shape[-1] == 656, f"not the packed fp8 layout: {tuple(k_cache.shape)}"
        rows = dequantize_packed(k_cache.reshape(-1, k_cache.shape[-1]))
        self.keep(rows, indices)
        return rows

    def flash_mla_with_kvcache_kernel(self, kernel: Callable[..., Any]) -> Callable[..., Any]:
        """FlashMLA's own ``flash_mla_with_kvcache`` (on the GPU), recorded, run as called."""

        def run(q, k_cache, *args, indices=None, **kw):
            self.keep_packed(k_cache, indices)
            return kernel(q, k_cache, *args, indices=indices, **kw)

        return run

    def flash_mla_with_kvcache(self, mla: SparseMLA) -> Callable[..., Any]:
        """FlashMLA's paged sparse decode kernel as flashmla_kv prefill calls it: packed fp8
        pages, token indices into them; computed by the torch stand-in on dequantised rows.
        It first holds the schedule to FlashMLA's rule (:func:`check_num_splits`)."""

        def run(q, k_cache, cache_seqlens, head_dim_v, *, softmax_scale, indices, num_splits=None,
                **_):  # fmt: skip
            check_num_splits(num_splits, q)
            rows = self.keep_packed(k_cache, indices)
            o, _, lse = mla(q.squeeze(1), rows, indices.squeeze(1), softmax_scale, head_dim_v)
            return o.unsqueeze(1), lse

        return run


def check_num_splits(num_splits: torch.Tensor | None, q: torch.Tensor) -> None:
    """FlashMLA's check of a legacy schedule in ``sparse_decode_fwd`` (the sgl-flash-mla 1.0.0
    wheel's error, seen on an H100): ``num_splits`` has shape ``(b + 1)`` for the kernel's batch
    ``b = q.shape[0]``; raises as the wheel does. The ``flash_mla_with_kvcache`` stand-in runs it
    first, so a CPU run catches a schedule (:func:`_dsa_stand_ins.mla_schedule`) planned for
    other rows than the kernel is handed (2026-12-08: the suite handed it a CP rank's logical
    rows, not its padded ones)."""
    b = q.shape[0]
    if num_splits is None or tuple(num_splits.shape) != (b + 1,):
        got = None if num_splits is None else tuple(num_splits.shape)
        raise RuntimeError(
            f"sparse_attn_decode_interface (stand-in): num_splits must have shape (b+1); "
            f"b = {b} query rows, num_splits {got}"
        )


def topk_positions(score: torch.Tensor, lengths: torch.Tensor, k: int,
                   row_starts: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The fused top-k kernels' selection, per row: the ``k`` best of
    ``score[row, start : start + length]`` as positions in that window, ``-1`` past
    ``min(k, length)``.

    A window that fits ``k`` lists its positions in order (the kernels' naive path); a longer one
    lists them by score, descending, equal scores by lower position (the CUDA kernels leave the
    order, and which of several equal scores fill the last places, unspecified: any fixed rule
    keeps the two pools comparable bitwise). Returns int32 ``[rows, k]``.
    """
    rows, width = score.shape
    dev = score.device
    out = torch.full((rows, k), -1, dtype=torch.int32, device=dev)
    if rows == 0 or k == 0 or width == 0:
        return out
    lengths = lengths.to(device=dev, dtype=torch.int64)
    starts = (torch.zeros_like(lengths) if row_starts is None
              else row_starts.to(device=dev, dtype=torch.int64))  # fmt: skip
    rel = torch.arange(width, device=dev)[None, :] - starts[:, None]
    inside = (rel >= 0) & (rel < lengths[:, None])
    keyed = torch.where(inside, score.float(), float("-inf"))
    order = torch.sort(keyed, dim=1, descending=True, stable=True).indices[:, :k]
    ranked = torch.full((rows, k), -1, dtype=torch.int64, device=dev)
    ranked[:, : order.shape[1]] = order - starts[:, None]
    cols = torch.arange(k, device=dev)[None, :]
    picked = torch.where((lengths <= k)[:, None], cols, ranked)
    return torch.where(cols < lengths.clamp(max=k)[:, None], picked, -1).to(torch.int32)


class FusedTopK:
    """Stand-ins for the fused top-k kernels SGLang's ``DSATopKBackend.topk_transform`` calls with
    ``SGLANG_DSA_FUSE_TOPK`` on and ``--dsa-topk-backend sgl-kernel`` (SGLang's defaults), each
    :func:`topk_positions` followed by the kernel's own index transform; counts its calls.

    - ``sgl_kernel.fast_topk_transform_fused`` (PAGED extend): row ``r`` belongs to the request
      ``b`` with ``cu_seqlens_q[b] <= r < cu_seqlens_q[b + 1]`` and position ``p`` becomes
      ``page_table_size_1[b, p]``;
    - ``dsv4.topk.topk_transform_ragged_v2`` (RAGGED extend) and
      ``sgl_kernel.fast_topk_transform_ragged_fused`` (its older kernel, which SGLang imports
      beside the PAGED one): ``p + out_offsets[r]``;
    - ``dsv4.topk.plan_topk_v2`` (``init_forward_metadata`` builds it for every batch): the
      routing plan only the paged v2 kernel reads, which SGLang calls for decode-shaped batches
      alone (no ``row_starts``; an extend passes them): ``(rows + 1, 2)`` int32 routing no row
      to the cluster path.
    """

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def fast_topk_transform_fused(self, score, lengths, page_table_size_1, cu_seqlens_q, topk,
                                  row_starts=None) -> torch.Tensor:  # fmt: skip
        self._count("fast_topk_transform_fused")
        pos = topk_positions(score, lengths, topk, row_starts)
        rows = torch.arange(score.shape[0], device=score.device)
        req = torch.searchsorted(cu_seqlens_q[1:].to(torch.int64), rows, right=True)
        table = page_table_size_1[req.clamp(max=page_table_size_1.shape[0] - 1)]
        slots = table.gather(1, pos.clamp(min=0).long())
        return torch.where(pos >= 0, slots, -1).to(torch.int32)

    def topk_transform_ragged_v2(self, scores, seq_lens, *, out_offsets, out_indices,
                                 row_starts=None) -> None:  # fmt: skip
        self._count("topk_transform_ragged_v2")
        pos = topk_positions(scores, seq_lens, out_indices.shape[1], row_starts)
        offsets = out_offsets.to(device=pos.device, dtype=torch.int64)[:, None]
        out_indices.copy_(torch.where(pos >= 0, pos + offsets, -1))

    def fast_topk_transform_ragged_fused(self, score, lengths, topk_indices_offset, topk,
                                         row_starts=None) -> torch.Tensor:  # fmt: skip
        self._count("fast_topk_transform_ragged_fused")
        pos = topk_positions(score, lengths, topk, row_starts)
        offsets = topk_indices_offset.to(device=pos.device, dtype=torch.int64)[:, None]
        return torch.where(pos >= 0, pos + offsets, -1).to(torch.int32)

    def plan_topk_v2(self, seq_lens, static_threshold=-1, *, out=None) -> torch.Tensor:
        self._count("plan_topk_v2")
        plan = seq_lens.new_zeros(seq_lens.shape[0] + 1, 2) if out is None else out.zero_()
        plan[0, 0] = -1
        return plan


def mla_rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox=True,
                          quantize_dtype=None, quant_scale_q=1.0, quant_scale_kv=1.0,
                          q_rope_out=None, k_rope_out=None, q_nope_out=None, k_nope_out=None,
                          enable_pdl=False):  # fmt: skip
    """flashinfer's ``rope.mla_rope_quantize_fp8`` in torch: RoPE from ``cos_sin_cache[pos]``
    (cosines then sines) on the RoPE parts, NeoX (halves) or interleaved (pairs), then every part
    times its scale cast to fp8 into the given outputs."""
    dtype = quantize_dtype or (q_rope_out.dtype if q_rope_out is not None
                               else torch.float8_e4m3fn)  # fmt: skip
    cs = cos_sin_cache[pos_ids.long()].float()
    half = cs.shape[-1] // 2
    cos, sin = cs[:, :half], cs[:, half:]

    def rotate(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if is_neox:
            a, b = x[..., :half], x[..., half:]
            return torch.cat([a * c - b * s, b * c + a * s], dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)

    parts = ((rotate(q_rope, cos[:, None], sin[:, None]), quant_scale_q, q_rope_out),
             (rotate(k_rope, cos, sin), quant_scale_kv, k_rope_out),
             (q_nope.float(), quant_scale_q, q_nope_out),
             (k_nope.float(), quant_scale_kv, k_nope_out))  # fmt: skip
    outs = []
    for x, scale, out in parts:
        y = (x * scale).to(dtype)
        outs.append(y if out is None else out.copy_(y.view(out.shape)))
    return tuple(outs)


def _sparse_mla_prefill_stand_in(mla: SparseMLA) -> Callable[..., Any]:
    def run(q_all, kv_cache, page_table_1, sm_scale, v_head_dim, topk_length=None, **_):
        return mla(q_all, kv_cache, page_table_1, sm_scale, v_head_dim, topk_length=topk_length)[0]

    return run


@contextlib.contextmanager
def installed(mp: Any, device: torch.device) -> Iterator[AttentionCalls]:
    """Install :data:`REPLACEMENTS` for ``device`` (through pytest's ``MonkeyPatch``); yields the
    attention recorder. The emulated GPU is entered per deployment, not here."""
    import sglang.kernels.ops.attention.dsa.triton_sparse_mla_prefill as triton_mla
    import sglang.srt.distributed.parallel_state as parallel_state
    import sglang.srt.layers.attention.dsa_backend as dsa_backend
    from sglang.srt.mem_cache import page_interleave_pool

    calls = AttentionCalls()
    mp.setattr(page_interleave_pool, "PyNcclCommunicator", GlooCommunicator)

    def all_gather_into_tensor(self, output, input):  # the coordinator's torch.distributed path
        gather_through_host(output, input, self.cpu_group if output.is_cuda else self.device_group)

    mp.setattr(parallel_state.GroupCoordinator, "all_gather_into_tensor", all_gather_into_tensor)
    compiled = dsa_backend._compiled_cat
    mp.setattr(dsa_backend, "_compiled_cat", inspect.unwrap(
        getattr(compiled, "_torchdynamo_orig_callable", compiled)))  # fmt: skip
    if device.type == "cpu":
        import sglang.kernels.ops.attention.dsa.dequant_k_cache as dequant
        import sglang.kernels.ops.quantization.dsa_quant_k_cache as quant

        mp.setattr(torch.cuda, "current_stream", torch.cpu.current_stream)
        mp.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
        mp.setattr(quant, "_quantize_k_cache_fast_kernel", fp8_quantizer())
        mp.setattr(dequant, "_dequantize_k_cache_paged_kernel", paged_dequantizer())
        mla = SparseMLA()
        mp.setitem(sys.modules, "sglang.kernels.ops.attention.flash_mla_interface",
                   types.SimpleNamespace(flash_mla_sparse_fwd=calls.flash_mla_sparse_fwd(mla),
                                         flash_mla_with_kvcache=calls.flash_mla_with_kvcache(mla),
                                         get_mla_metadata=mla_schedule))  # fmt: skip
        kernel = _sparse_mla_prefill_stand_in(mla)
        _install_trtllm(mp, calls, mla)
    else:
        kernel = triton_mla.sparse_mla_prefill
        _record_flashmla(mp, calls)
    mp.setattr(triton_mla, "sparse_mla_prefill", calls.sparse_mla_prefill(kernel))
    _install_fused_topk(mp, calls.topk)
    yield calls


def _record_flashmla(mp: Any, calls: AttentionCalls) -> None:
    """On the GPU, FlashMLA's kernels run for real but are recorded like the Triton one: without
    this the flashmla configurations' forwards read rows no record kept, and stopped at
    ``forward_extend did not reach sparse MLA`` (an H100, 2026-12-08). Where the sgl-flash-mla
    wheel does not load, its configurations cannot run and there is nothing to record."""
    try:
        import sglang.kernels.ops.attention.flash_mla_interface as flashmla
    except (ImportError, OSError):  # OSError: the wheel is there, its CUDA library does not load
        return
    # SGLang's DSA backend imports both from this module when it calls them
    mp.setattr(
        flashmla, "flash_mla_sparse_fwd", calls.flash_mla_sparse_fwd(flashmla.flash_mla_sparse_fwd)
    )  # flashmla_sparse
    mp.setattr(
        flashmla,
        "flash_mla_with_kvcache",
        calls.flash_mla_with_kvcache_kernel(flashmla.flash_mla_with_kvcache),
    )  # flashmla_kv


def _install_fused_topk(mp: Any, fused: FusedTopK) -> None:
    """The fused top-k kernels (:class:`FusedTopK`), where SGLang's ``topk_transform`` imports
    them from when it runs: ``sgl_kernel`` (a module of those functions alone where the package
    cannot load: it needs CUDA's driver library) and ``dsv4.topk``."""
    import sglang.kernels.ops.attention.dsv4.topk as topk_v2

    try:
        import sgl_kernel
    except ImportError:
        sgl_kernel = types.ModuleType("sgl_kernel")
        mp.setitem(sys.modules, "sgl_kernel", sgl_kernel)
    for name in ("fast_topk_transform_fused", "fast_topk_transform_ragged_fused"):
        mp.setattr(sgl_kernel, name, getattr(fused, name), raising=False)
    for name in ("topk_transform_ragged_v2", "plan_topk_v2"):
        mp.setattr(topk_v2, name, getattr(fused, name))


def _install_trtllm(mp: Any, calls: AttentionCalls, mla: SparseMLA) -> None:
    """trtllm's two flashinfer kernels and the SM count that sizes its scratch (CPU)."""
    try:
        import flashinfer.decode
        import flashinfer.rope
        import flashinfer.utils
    except ImportError:  # no trtllm configuration can run; the others need none of it
        return
    mp.setattr(flashinfer.decode, "trtllm_batch_decode_with_kv_cache_mla",
               calls.trtllm_sparse_mla(mla))  # fmt: skip
    mp.setattr(flashinfer.rope, "mla_rope_quantize_fp8", mla_rope_quantize_fp8)
    mp.setattr(flashinfer.utils, "get_device_sm_count", lambda device=None: SM100_SMS)
    import sglang.srt.layers.attention.trtllm_mla_backend as trtllm_mla

    # the module binds flashinfer only where is_flashinfer_available() (CUDA) holds
    mp.setattr(trtllm_mla, "flashinfer", flashinfer, raising=False)


@contextlib.contextmanager
def no_rope_module() -> Iterator[None]:
    """Build an ``Indexer`` without its rotary module (see :data:`REPLACEMENTS`)."""
    import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer

    saved = dsa_indexer.get_rope_wrapper
    dsa_indexer.get_rope_wrapper = lambda *a, **k: None
    try:
        yield
    finally:
        dsa_indexer.get_rope_wrapper = saved


class LogitsCalls:
    """The indexer's MQA-logits calls: ``(k_fp8, k_scale, logits)`` of each, as computed (the
    logits inside each row's ``[ks, ke)`` window, the only part the top-k reads).

    Wraps whatever ``resolve_fp8_mqa_logits_fn()`` returns (SGLang's torch fallback on a CPU,
    DeepGEMM on the GPU); the keys it receives are the rows the indexer read from the pool.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer

        resolve = dsa_indexer.resolve_fp8_mqa_logits_fn
        real = resolve()

        def logits(q, kv, weights, ks, ke, clean_logits=False, **kw):
            q = q.as_subclass(torch.Tensor)
            out = real(q, kv, weights, ks, ke, clean_logits=clean_logits, **kw)
            # The indexer asks for clean_logits=False: outside each row's [ks, ke) DeepGEMM
            # leaves whatever the buffer held (the top-k transform never reads it). Kept as 0.
            cols = torch.arange(out.shape[1], device=out.device)[None, :]
            valid = (cols >= ks[:, None]) & (cols < ke[:, None])
            self.calls.append((kv[0].view(torch.uint8).cpu().clone(), kv[1].cpu().clone(),
                               torch.where(valid, out, 0.0).cpu()))  # fmt: skip
            return out

        dsa_indexer.resolve_fp8_mqa_logits_fn = lambda: logits
        try:
            yield
        finally:
            dsa_indexer.resolve_fp8_mqa_logits_fn = resolve
