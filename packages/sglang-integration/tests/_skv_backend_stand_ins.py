"""The test doubles of the backend-level shared-KV suite, and the recorders it reads results from.

Everything that maps pages, rows or indices is SGLang's or cpkv's own code, run as shipped:
``init_forward_metadata`` and its CP split (the Triton kernel runs in Triton's interpreter on a
CPU), the indexer's key store and page reads (``SetKAndS``/``GetKAndS``), SGLang's torch top-k
(``--dsa-topk-backend torch``, ``SGLANG_DSA_FUSE_TOPK=0``), ``transform_index_page_table_prefill``,
both pools' stores and gathers, cpkv's plan. :func:`check_originals`
asserts that at the start of every run. What stands in (:data:`REPLACEMENTS`) is math or
environment that cannot run without a GPU; on the GPU only the environment rows apply.
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
from _dsa_stand_ins import SparseMLA, _empty_mla_schedule, fp8_quantizer, paged_dequantizer

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
     "first); on the GPU SGLang's Triton sparse_mla_prefill runs for real", "cpu"),
    ("dequant_k_cache._dequantize_k_cache_paged_kernel (Triton; RAGGED batches with a prefix "
     "dequantise the rows of SGLang's page_table_1_flattened)",
     "in Triton's interpreter it ran one program per row and 128 columns: 389 of 435 s of a "
     "CP 2 run", "torch with the kernel's contract, out[i] = dequant(cache[table[i]]), held "
     "bitwise equal to the interpreted kernel by test_skv_backend_stand_ins.py", "cpu"),
    ("FlashMLA's get_mla_metadata (flashmla_kv's tile scheduler)", "CUDA only",
     "empty scheduler tensors (only the replaced kernel reads them)", "cpu"),
    ("the indexer's fp8 MQA logits", "DeepGEMM needs a GPU",
     "SGLang's own torch fallback (SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1); DeepGEMM on the GPU",
     "cpu"),
    ("the indexer's 'indexed CUDA device' assert (q_fp8.device.index)", "CPU tensors have none",
     "q_fp8 wrapped so its device reads cpu:0", "cpu"),
    ("dsa_backend._compiled_cat (torch.compile)", "inductor would build C++ per shape",
     "its own function, eager", "both"),
    ("the modules sgl_kernel, sgl_kernel.quantization, sgl_kernel.kvcacheio and IPython (where "
     "not installed)", "the GPU box has neither (sgl-kernel is 1.2 GB); SGLang imports them at "
     "module level on CUDA", "modules whose every function raises when called (IPython.display "
     "a no-op): the DSA path under test calls none of them, and a call would fail loudly", "gpu"),
    ("the indexer's rotary-embedding module, at construction only",
     "its CPU constructor imports vLLM; the suite hands the indexer its keys, never calls it",
     "None while Indexer.__init__ runs", "both"),
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


def _source_module(obj: Any) -> str:
    fn = getattr(obj, "fn", obj)  # a Triton JITFunction / InterpretedFunction holds .fn
    return getattr(fn, "__module__", "") or ""


_KERNEL_MODULES = ("sgl_kernel", "sgl_kernel.quantization", "sgl_kernel.kvcacheio")


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
    for module, cls, name in OUR_METHODS:
        owner = getattr(importlib.import_module(module), cls)
        fn = owner.__dict__.get(name)
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

    Wraps the kernel that runs (the torch stand-in on a CPU, SGLang's Triton kernel on the GPU)
    and keeps what the backend handed it, with the per-row valid length applied.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

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

    def flash_mla_with_kvcache(self, mla: SparseMLA) -> Callable[..., Any]:
        """FlashMLA's paged sparse decode kernel as flashmla_kv prefill calls it: packed fp8
        pages, token indices into them; computed by the torch stand-in on dequantised rows."""

        def run(q, k_cache, cache_seqlens, head_dim_v, *, softmax_scale, indices, **_):
            rows = dequantize_packed(k_cache.reshape(-1, k_cache.shape[-1]))
            self.keep(rows, indices)
            o, _, lse = mla(q.squeeze(1), rows, indices.squeeze(1), softmax_scale, head_dim_v)
            return o.unsqueeze(1), lse

        return run


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
                                         get_mla_metadata=_empty_mla_schedule))  # fmt: skip
        kernel = _sparse_mla_prefill_stand_in(mla)
    else:
        kernel = triton_mla.sparse_mla_prefill
    mp.setattr(triton_mla, "sparse_mla_prefill", calls.sparse_mla_prefill(kernel))
    yield calls


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
