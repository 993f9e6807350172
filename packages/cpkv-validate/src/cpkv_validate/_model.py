"""The reference model's math: seeded weights, MLA with a latent KV cache, the lightning indexer.

Weights are a state dict in transformers' ``GlmMoeDsaModel`` naming (``layers.{l}.self_attn.
q_a_proj.weight`` ...), so the HF match test loads them with ``load_state_dict``. The functions
below are row-wise: each token's projections depend on that token alone, and attention reads KV
rows handed to it — which is what lets the engine feed them rows from a paged pool through the
cpkv dense layout and compare the result against batch size 1.

Semantics follow transformers 5.19 ``modeling_glm_moe_dsa`` (interleaved RoPE on the rope slice,
RMSNorm on the q and kv latents, LayerNorm on the indexer key, ``relu(q·k / sqrt(d))`` weighted by
``weights_proj(x) / sqrt(H_idx)``); attention is the absorbed MLA form (``W_UK`` folded into q,
``W_UV`` applied after), equal to HF's expanded form up to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._config import ModelConfig

__all__ = [
    "AttnInputs",
    "absorbed_attention",
    "attention_inputs",
    "attention_output",
    "index_scores",
    "init_weights",
    "mlp",
    "rms_norm",
    "rope_cos_sin",
    "select_topk",
]

Weights = dict[str, torch.Tensor]


def init_weights(
    cfg: ModelConfig, seed: int, dtype: torch.dtype = torch.float64, device: str = "cpu"
) -> Weights:
    """Seeded random weights, drawn on the CPU in float64 so every device and rank gets the same.

    Linear weights are ``N(0, 1/fan_in)`` (activations stay O(1) through the stack); norm weights
    are ``1 + N(0, 0.1)`` so a mix-up of norms is visible.
    """
    gen = torch.Generator().manual_seed(seed)

    def lin(out_f: int, in_f: int) -> torch.Tensor:
        return torch.randn(out_f, in_f, generator=gen, dtype=torch.float64) * in_f**-0.5

    def norm(n: int) -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)

    h, nh = cfg.hidden_size, cfg.num_attention_heads
    w: Weights = {"embed_tokens.weight": torch.randn(cfg.vocab_size, h, generator=gen).double()}
    for layer, kind in enumerate(cfg.indexer_types):
        p = f"layers.{layer}."
        a = p + "self_attn."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[a + "q_a_proj.weight"] = lin(cfg.q_lora_rank, h)
        w[a + "q_a_layernorm.weight"] = norm(cfg.q_lora_rank)
        w[a + "q_b_proj.weight"] = lin(nh * cfg.qk_head_dim, cfg.q_lora_rank)
        w[a + "kv_a_proj_with_mqa.weight"] = lin(cfg.latent_dim, h)
        w[a + "kv_a_layernorm.weight"] = norm(cfg.kv_lora_rank)
        w[a + "kv_b_proj.weight"] = lin(
            nh * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank
        )
        w[a + "o_proj.weight"] = lin(h, nh * cfg.v_head_dim)
        if kind == "full":
            i = a + "indexer."
            w[i + "wq_b.weight"] = lin(cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank)
            w[i + "wk.weight"] = lin(cfg.index_head_dim, h)
            w[i + "k_norm.weight"] = norm(cfg.index_head_dim)
            w[i + "k_norm.bias"] = 0.1 * torch.randn(cfg.index_head_dim, generator=gen).double()
            w[i + "weights_proj.weight"] = lin(cfg.index_n_heads, h)
        w[p + "mlp.gate_proj.weight"] = lin(cfg.intermediate_size, h)
        w[p + "mlp.up_proj.weight"] = lin(cfg.intermediate_size, h)
        w[p + "mlp.down_proj.weight"] = lin(h, cfg.intermediate_size)
    w["norm.weight"] = norm(h)
    w["lm_head.weight"] = lin(cfg.vocab_size, h)
    return {k: v.to(device=device, dtype=dtype) for k, v in w.items()}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF ``GlmMoeDsaRMSNorm``: statistics in fp32 (or wider), result in ``x``'s dtype."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair RoPE angles for ``positions``: (T,) -> cos, sin of shape (T, qk_rope_head_dim/2).

    Computed in fp32 exactly as HF's rotary embedding does, then cast to ``dtype``.
    """
    dim = cfg.qk_rope_head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[:, None] * inv_freq.to(positions.device)[None, :]
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF ``apply_rotary_pos_emb_interleave`` on x: (T, ..., d) with cos/sin (T, d/2)."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[-1],)
    c, s = cos.view(shape), sin.view(shape)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class AttnInputs:
    """Per-token projections of one layer for T tokens (all row-wise).

    Attributes:
        q_abs: (T, H, kv_lora_rank) the no-rope query with ``W_UK`` absorbed.
        q_rot: (T, H, qk_rope_head_dim) the roped query.
        latent: (T, kv_lora_rank + qk_rope_head_dim) the KV cache row (normed latent ‖ roped k).
        idx_q: (T, H_idx, index_head_dim) indexer query, or None on a shared layer.
        idx_k: (T, index_head_dim) indexer key (the indexer cache row), or None.
        idx_w: (T, H_idx) indexer head weights (already scaled by ``H_idx ** -0.5``), or None.
    """

    __slots__ = ("idx_k", "idx_q", "idx_w", "latent", "q_abs", "q_rot")

    def __init__(self, **kw: torch.Tensor | None) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def attention_inputs(
    w: Weights, cfg: ModelConfig, layer: int, x: torch.Tensor, positions: torch.Tensor
) -> AttnInputs:
    """Project normed hidden states x: (T, hidden) at ``positions`` (T,) into attention inputs."""
    a = f"layers.{layer}.self_attn."
    t, nh = x.shape[0], cfg.num_attention_heads
    cos, sin = rope_cos_sin(positions, cfg, x.dtype)
    q_resid = rms_norm(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], 1e-6)
    q = (q_resid @ w[a + "q_b_proj.weight"].T).view(t, nh, cfg.qk_head_dim)
    q_nope, q_rot = q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
    kv_b = w[a + "kv_b_proj.weight"].view(nh, cfg.qk_nope_head_dim + cfg.v_head_dim, -1)
    q_abs = torch.einsum("thn,hnr->thr", q_nope, kv_b[:, : cfg.qk_nope_head_dim])
    ckv = x @ w[a + "kv_a_proj_with_mqa.weight"].T
    kv_pass, k_rot = ckv.split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
    kv_pass = rms_norm(kv_pass, w[a + "kv_a_layernorm.weight"], 1e-6)
    latent = torch.cat([kv_pass, _rope(k_rot, cos, sin)], dim=-1)
    out = AttnInputs(
        q_abs=q_abs, q_rot=_rope(q_rot, cos, sin), latent=latent, idx_q=None, idx_k=None, idx_w=None
    )
    i = a + "indexer."
    if i + "wq_b.weight" in w:
        r = cfg.qk_rope_head_dim
        iq = (q_resid @ w[i + "wq_b.weight"].T).view(t, cfg.index_n_heads, cfg.index_head_dim)
        out.idx_q = torch.cat([_rope(iq[..., :r], cos, sin), iq[..., r:]], dim=-1)
        ik = F.layer_norm(
            x @ w[i + "wk.weight"].T,
            (cfg.index_head_dim,),
            w[i + "k_norm.weight"],
            w[i + "k_norm.bias"],
            1e-6,
        )
        out.idx_k = torch.cat([_rope(ik[:, :r], cos, sin), ik[:, r:]], dim=-1)
        out.idx_w = (x @ w[i + "weights_proj.weight"].T) * cfg.index_n_heads**-0.5
    return out


def index_scores(
    idx_q: torch.Tensor, idx_w: torch.Tensor, keys: torch.Tensor, cfg: ModelConfig
) -> torch.Tensor:
    """Lightning-indexer scores of n queries against L keys of their request.

    Args:
        idx_q: (n, H_idx, D_idx); idx_w: (n, H_idx); keys: (L, D_idx) or (n, L, D_idx).

    Returns:
        (n, L) float32 or wider: ``sum_h idx_w[h] * relu(q_h · k / sqrt(D_idx))``.
    """
    acc = torch.float32 if idx_q.dtype in (torch.float16, torch.bfloat16) else idx_q.dtype
    q, k = idx_q.to(acc), keys.to(acc)
    s = q @ k.T if k.dim() == 2 else torch.einsum("nhd,nld->nhl", q, k)
    s = F.relu(s * cfg.index_head_dim**-0.5)
    return torch.einsum("nh,nhl->nl", idx_w.to(acc), s)


def select_topk(
    scores: torch.Tensor, valid: torch.Tensor, k: int, stable: bool = True
) -> torch.Tensor:
    """Top-k key indices per query, ties broken by the lower index, returned in ascending order.

    Args:
        scores: (n, L); valid: (n, L) bool, False = not selectable (future or padding).
        k: how many to keep.
        stable: break ties by index (a full stable sort); False uses ``torch.topk`` (much
            faster at 128K keys, ties resolved however the device's kernel does).

    Returns:
        (n, min(k, L)) int64 indices into L, ascending, -1 where fewer than k were valid.
        Deterministic tie-breaking and a canonical order keep the result independent of the batch.
    """
    kk = min(k, scores.shape[1])
    s = scores.masked_fill(~valid, float("-inf"))
    if stable:
        order = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :kk]
    else:
        order = torch.topk(s, kk, dim=1).indices
    ok = valid.gather(1, order)
    idx = torch.where(ok, order, torch.full_like(order, scores.shape[1]))
    idx = idx.sort(dim=1).values
    return torch.where(idx == scores.shape[1], -1, idx)


def absorbed_attention(
    q_abs: torch.Tensor,
    q_rot: torch.Tensor,
    rows: torch.Tensor,
    valid: torch.Tensor,
    cfg: ModelConfig,
) -> torch.Tensor:
    """Sparse MLA over gathered latent rows.

    Args:
        q_abs: (n, H, R), q_rot: (n, H, r); rows: (n, K, R + r) latent KV rows the queries read;
        valid: (n, K) bool (padding rows of a short top-k are False).

    Returns:
        (n, H, R) attention-weighted latents (``W_UV`` not applied yet).
    """
    kv_r = cfg.kv_lora_rank
    scale = cfg.qk_head_dim**-0.5
    s = torch.einsum("nhr,nkr->nhk", q_abs, rows[..., :kv_r])
    s = s + torch.einsum("nhr,nkr->nhk", q_rot, rows[..., kv_r:])
    s = (s * scale).masked_fill(~valid[:, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32 if s.dtype != torch.float64 else s.dtype)
    return torch.einsum("nhk,nkr->nhr", p.to(rows.dtype), rows[..., :kv_r])


def attention_output(w: Weights, cfg: ModelConfig, layer: int, o_lat: torch.Tensor) -> torch.Tensor:
    """(n, H, R) attended latents -> (n, hidden): ``W_UV`` per head, then ``o_proj``."""
    a = f"layers.{layer}.self_attn."
    nh = cfg.num_attention_heads
    kv_b = w[a + "kv_b_proj.weight"].view(nh, cfg.qk_nope_head_dim + cfg.v_head_dim, -1)
    v = torch.einsum("nhr,hvr->nhv", o_lat, kv_b[:, cfg.qk_nope_head_dim :])
    return v.reshape(o_lat.shape[0], -1) @ w[a + "o_proj.weight"].T


def mlp(w: Weights, layer: int, x: torch.Tensor) -> torch.Tensor:
    """HF ``GlmMoeDsaMLP``: ``down(silu(gate(x)) * up(x))``."""
    p = f"layers.{layer}.mlp."
    return (F.silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)) @ w[
        p + "down_proj.weight"
    ].T
