"""One DSA attention layer of GLM-5.1 on one rank, two ways, for ``bench_shared_kv_layer.py``.

- **cpkv**: plan the forward's layout once (``plan_layout_static``), then per layer materialize
  the batch's pages into a scratch buffer, write the current KV over its private slots, remap the
  indexer's top-k pool locations into it (one ``LayerStep``), and run the attention over the
  scratch.
- **replica**: SGLang's default CP path keeps a full KV replica per rank, so the same attention
  reads the whole pool with the pool locations as indices; nothing is materialised.

Both share the indexer: per request, its index keys gathered from the index-K pool (what
SGLang's ``get_index_k_scale_buffer`` does), DeepGEMM's fp8 ``mqa_logits`` through the
``deepgemm_compat`` facade, causal masking, ``torch.topk`` and the page-table transform of
top-k positions to pool locations. The attention is SGLang's own Triton sparse-MLA prefill kernel
(``sparse_mla_prefill(q [T, H, 576] bf16, kv [S, 576] bf16, indices [T, K] int32, sm_scale,
d_v=512)``). The current KV is in the pool before attention on both paths (SGLang writes it
first), so both read the same rows in the same order and must give the same bytes.

Model numbers are GLM-5.1's (``config.json``): 64 attention heads (per rank under CP 8, where
attention TP is 1; TP 8 without CP would give 8), kv_lora_rank 512 + qk_rope_head_dim 64 = 576,
v 512 (absorbed), indexer 32 heads x 128, index_topk 2048, 78 layers, page size 64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import cpkv_runtime as cr
import torch


@dataclass(frozen=True)
class Dims:
    """GLM-5.1 per-rank attention dimensions."""

    heads: int = 64
    d_qk: int = 576  # kv_lora_rank 512 + qk_rope_head_dim 64
    d_v: int = 512
    index_heads: int = 32
    index_dim: int = 128
    topk: int = 2048
    layers: int = 78
    page_size: int = 64
    qk_head_dim: int = 192 + 64  # qk_nope_head_dim + qk_rope_head_dim: the softmax scale's dim

    @property
    def sm_scale(self) -> float:
        return self.qk_head_dim**-0.5


@dataclass(frozen=True)
class LayerCase:
    """``bsz`` requests on one shared prefix of ``prefix`` tokens, each adding ``new`` tokens."""

    name: str
    bsz: int
    prefix: int
    new: int

    @property
    def tokens(self) -> int:
        return self.bsz * self.new


CASES = {
    c.name: c
    for c in (
        LayerCase("8x(64K+2K)", 8, 65536, 2048),
        LayerCase("1x64K", 1, 0, 65536),
        LayerCase("1x128K", 1, 0, 131072),
    )
}
DRY_CASE = LayerCase("dry 3x(128+40)", 3, 128, 40)
DRY_DIMS = Dims(heads=4, d_qk=80, d_v=64, index_heads=2, index_dim=16, topk=32, page_size=16)


@dataclass
class Inputs:
    """Everything one forward of one layer reads, built once; shapes in the field comments."""

    case: LayerCase
    dims: Dims
    req_pages: torch.Tensor  # (B, M) int32 pool pages, -1 past each request's pages
    prefix: torch.Tensor  # (B,) int32
    extend: torch.Tensor  # (B,) int32
    num_pages: int
    kv_pool: torch.Tensor  # (num_pages, P, d_qk) bf16, current KV already written
    current_kv: torch.Tensor  # (T, d_qk) bf16
    token_req: torch.Tensor  # (T,) int32
    token_pos: torch.Tensor  # (T,) int32
    loc: torch.Tensor  # (T,) int32 pool locations of the current tokens
    q: torch.Tensor  # (T, H, d_qk) bf16
    index_k: torch.Tensor  # (num_pages * P, index_dim) fp8 (bf16 on CPU)
    index_scale: torch.Tensor  # (num_pages * P,) float32
    index_q: torch.Tensor  # (T, index_heads, index_dim) fp8 (bf16 on CPU)
    index_w: torch.Tensor  # (T, index_heads) float32
    key_locs: list[torch.Tensor]  # per request: (seq_b,) int64 pool location of each position

    @property
    def capacity(self) -> int:
        """``sum(ceil(seq_lens / P))``: the slot capacity a host knows without a sync."""
        p = self.dims.page_size
        return self.case.bsz * math.ceil((self.case.prefix + self.case.new) / p)


def build_inputs(case: LayerCase, dims: Dims, device: str, seed: int = 0) -> Inputs:
    """Pages of one shared prefix plus private pages per request, shuffled over a pool with 25%
    spare pages; random KV, queries and indexer inputs; the current KV written into the pool."""
    gen = torch.Generator().manual_seed(seed)
    p = dims.page_size
    shared = case.prefix // p
    own = math.ceil((case.prefix % p + case.new) / p)
    used = shared + case.bsz * own
    num_pages = used + max(used // 4, 1)
    perm = torch.randperm(num_pages, generator=gen).int()
    rows = [
        torch.cat([perm[:shared], perm[shared + b * own : shared + (b + 1) * own]])
        for b in range(case.bsz)
    ]
    req_pages = torch.stack(rows).to(device)
    prefix = torch.full((case.bsz,), case.prefix, dtype=torch.int32, device=device)
    extend = torch.full((case.bsz,), case.new, dtype=torch.int32, device=device)
    exact = cr.plan_layout(req_pages, prefix, extend, p, num_pages)
    token_req, token_pos, loc = cr.current_tokens(exact)

    def randn(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    t = case.tokens
    fp8 = torch.float8_e4m3fn if device == "cuda" else torch.bfloat16
    kv_pool = randn(num_pages, p, dims.d_qk)
    current_kv = randn(t, dims.d_qk)
    kv_pool.view(-1, dims.d_qk)[loc.long()] = current_kv  # the cache write, before attention
    seq = case.prefix + case.new
    positions = torch.arange(seq, device=device)
    key_locs = [req_pages[b].long()[positions // p] * p + positions % p for b in range(case.bsz)]
    return Inputs(
        case=case,
        dims=dims,
        req_pages=req_pages,
        prefix=prefix,
        extend=extend,
        num_pages=num_pages,
        kv_pool=kv_pool,
        current_kv=current_kv,
        token_req=token_req,
        token_pos=token_pos,
        loc=loc,
        q=randn(t, dims.heads, dims.d_qk),
        index_k=randn(num_pages * p, dims.index_dim).to(fp8),
        index_scale=(torch.rand(num_pages * p, generator=gen) + 0.5).to(device),
        index_q=randn(t, dims.index_heads, dims.index_dim).to(fp8),
        index_w=torch.rand(t, dims.index_heads, generator=gen).to(device),
        key_locs=key_locs,
    )


# --- the indexer (shared by both paths) ---------------------------------------------------

MqaLogits = Callable[..., torch.Tensor]


def mqa_logits_reference(q, kv, kv_scale, weights, ks, ke, *, clean_logits=False) -> torch.Tensor:
    """``sum_h relu(q[t, h] · kv[j] * kv_scale[j]) * weights[t, h]`` in float32, every column.

    A CPU stand-in for DeepGEMM's fp8 kernel in ``--dry`` runs only (the kernel needs CUDA).
    """
    scores = torch.einsum("thd,jd->thj", q.float(), kv.float()) * kv_scale.view(1, 1, -1)
    return (scores.relu() * weights.unsqueeze(-1)).sum(1)


class Indexer:
    """Top-k pool locations of every current token: logits per request, causal, top-k.

    Rows of one request go through ``mqa_logits`` in chunks whose ``(rows, seq)`` float32 logits
    stay under ``budget_bytes`` (SGLang chunks the same way). Everything is a device op on
    precomputed tensors: no host sync, so it runs in a CUDA graph too.
    """

    def __init__(self, inp: Inputs, mqa_logits: MqaLogits, budget_bytes: int = 4 << 30) -> None:
        self.inp, self.mqa_logits = inp, mqa_logits
        case, device = inp.case, inp.q.device
        seq = case.prefix + case.new
        rows = max(1, min(case.new, budget_bytes // (4 * seq)))
        self.chunks = [
            (b, lo, min(lo + rows, case.new))
            for b in range(case.bsz)
            for lo in range(0, case.new, rows)
        ]
        self.ke = (inp.token_pos + 1).int()  # causal: row t sees positions [0, pos_t]
        self.ks = torch.zeros_like(self.ke)
        self.cols = torch.arange(seq, device=device)
        self.out = torch.empty((case.tokens, inp.dims.topk), dtype=torch.int32, device=device)

    def __call__(self) -> torch.Tensor:
        inp, k = self.inp, self.inp.dims.topk
        gathered: tuple[int, torch.Tensor, torch.Tensor] | None = None
        for b, lo, hi in self.chunks:
            keys = inp.key_locs[b]
            if gathered is None or gathered[0] != b:  # the request's index keys, in order
                rows = inp.index_k.view(torch.uint8).index_select(0, keys)
                gathered = (b, rows.view(inp.index_k.dtype), inp.index_scale.index_select(0, keys))
            t0, t1 = b * inp.case.new + lo, b * inp.case.new + hi
            logits = self.mqa_logits(
                inp.index_q[t0:t1],
                gathered[1],
                gathered[2],
                inp.index_w[t0:t1],
                self.ks[t0:t1],
                self.ke[t0:t1],
                clean_logits=False,
            )
            logits.masked_fill_(
                self.cols[None, : logits.shape[1]] >= self.ke[t0:t1, None], -math.inf
            )
            values, pos = logits.topk(min(k, logits.shape[1]), dim=1)
            locs = torch.where(values > -math.inf, keys[pos], -1)
            self.out[t0:t1, : locs.shape[1]] = locs.int()
            self.out[t0:t1, locs.shape[1] :] = -1
        return self.out


# --- the attention ------------------------------------------------------------------------


def sparse_mla_reference(q, kv, indices, sm_scale, d_v=512, *, out=None) -> torch.Tensor:
    """Gather-softmax sparse MLA in float32 (-1 skipped): the CPU stand-in for ``--dry``."""
    valid = indices >= 0
    rows = kv.float()[indices.clamp(min=0).long()]  # (T, K, d_qk)
    scores = torch.einsum("thd,tkd->thk", q.float(), rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], -math.inf)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    result = torch.einsum("thk,tkd->thd", probs, rows[..., :d_v]).to(q.dtype)
    if out is None:
        return result
    return out.copy_(result)


def load_sparse_mla() -> Callable[..., torch.Tensor]:
    """SGLang's Triton sparse-MLA prefill kernel (imports without sgl-kernel)."""
    from _sglang_kernels import load_sparse_mla_prefill

    return load_sparse_mla_prefill()
