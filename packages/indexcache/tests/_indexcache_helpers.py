"""Test toolkit: a float64 oracle, a tie-aware top-k comparator, and a tiny transformers model.

The tiny model is transformers' own ``GlmMoeDsaForCausalLM`` (random seeded weights, no download);
``run_tiny`` captures, per layer, the top-k its attention used and the inputs of every indexer that
ran, so tests can replay the indexer with our reference and thread it through our carry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
EXAMPLES = 300 if CI else 60  # hypothesis examples per property (explicit, not a global profile)


# Oracle -----------------------------------------------------------------------------------------
def oracle_logits(q, k, weights, ks, ke, softmax_scale=None) -> torch.Tensor:
    """Index logits in float64 on CPU, straight from the formula (einsum, then the window)."""
    q64, k64, w64 = q.double().cpu(), k.double().cpu(), weights.double().cpu()
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    dots = torch.einsum("mhd,nd->mhn", q64, k64) * scale
    out = torch.einsum("mh,mhn->mn", w64, dots.clamp_min(0))
    cols = torch.arange(k.shape[0])
    visible = (cols >= ks.cpu().long()[:, None]) & (cols < ke.cpu().long()[:, None])
    return out.masked_fill(~visible, float("-inf"))


def assert_topk_valid(got: torch.Tensor, logits: torch.Tensor, k: int, atol: float) -> None:
    """Check ``got`` is a top-k of ``logits`` up to ties within ``atol``; name the first bad row.

    Every visible pick must score within ``atol`` of the k-th best, every key that beats the k-th
    best by more than ``atol`` must be picked, and no key may be picked twice.
    """
    got, logits = got.cpu().long(), logits.cpu().double()
    assert got.shape == (logits.shape[0], min(k, logits.shape[1])), got.shape
    for m in range(logits.shape[0]):
        row, picks = logits[m], got[m].tolist()
        assert len(set(picks)) == len(picks), f"row {m}: duplicate picks {picks}"
        visible = row[row > float("-inf")]
        kth = (
            visible.sort(descending=True).values[min(k, visible.numel()) - 1]
            if visible.numel()
            else None
        )
        chosen = [p for p in picks if p >= 0 and row[p] > float("-inf")]
        assert len(chosen) == min(k, visible.numel()), f"row {m}: {len(chosen)} visible picks"
        for p in chosen:
            assert row[p] >= kth - atol, f"row {m}: picked key {p} ({row[p]:.6g}) < k-th {kth:.6g}"
        if kth is not None:
            must = (row > kth + atol).nonzero().flatten().tolist()
            missing = sorted(set(must) - set(chosen))
            assert not missing, f"row {m}: keys {missing} beat the k-th score but were not picked"


# Tiny transformers model ------------------------------------------------------------------------
def tiny_config(num_layers: int = 8, attn: str = "eager", **indexcache: Any):
    """A small GlmMoeDsaConfig: 8 layers, hidden 64, 4 indexer heads of 16, index_topk 8."""
    from transformers import GlmMoeDsaConfig

    return GlmMoeDsaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=4,
        n_routed_experts=4, num_experts_per_tok=2, kv_lora_rank=16, q_lora_rank=32,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, index_topk=8,
        index_head_dim=16, index_n_heads=4, first_k_dense_replace=1,
        max_position_embeddings=256, attn_implementation=attn, **indexcache,
    )  # fmt: skip


@dataclass
class TinyRun:
    """What one forward of the tiny model did, layer by layer."""

    topk: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (B, S, k) used
    indexer_inputs: dict[int, dict[str, Any]] = field(default_factory=dict)  # full layers only
    logits: torch.Tensor | None = None


def build_tiny(seed: int = 0, **config_kwargs: Any):
    from transformers import GlmMoeDsaForCausalLM

    torch.manual_seed(seed)
    return GlmMoeDsaForCausalLM(tiny_config(**config_kwargs)).eval()


def run_tiny(model, input_ids: torch.Tensor) -> TinyRun:
    """One forward with hooks: the top-k each attention used, and each indexer's inputs."""
    run, handles = TinyRun(), []

    def on_indexer(mod, args, kwargs):
        hs, q_resid, pos_emb, mask = args[:4]
        run.indexer_inputs[mod.layer_idx] = {
            "module": mod,
            "hidden_states": hs,
            "q_resid": q_resid,
            "pos_emb": pos_emb,
            "mask": mask,
        }

    def on_attention(mod, args, kwargs, out):
        run.topk[mod.layer_idx] = out[2]

    for layer in model.model.layers:
        handles.append(layer.self_attn.register_forward_hook(on_attention, with_kwargs=True))
        if layer.self_attn.indexer is not None:
            handles.append(
                layer.self_attn.indexer.register_forward_pre_hook(on_indexer, with_kwargs=True)
            )
    try:
        with torch.no_grad():
            run.logits = model(input_ids).logits
    finally:
        for h in handles:
            h.remove()
    return run


def project_indexer_inputs(captured: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """transformers' indexer projections + interleaved RoPE -> (q, k, weights) for our reference.

    Returns ``q (B, S, H, D)``, ``k (B, S, D)``, ``weights (B, S, H)``, the module's softmax scale.
    """
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (
        apply_rotary_pos_emb_interleave,
    )

    mod, hs, q_resid = captured["module"], captured["hidden_states"], captured["q_resid"]
    b, s, _ = hs.shape
    rope = mod.qk_rope_head_dim
    with torch.no_grad():
        q = mod.wq_b(q_resid).view(b, s, mod.n_heads, mod.head_dim)
        q_rot, q_pass = torch.split(q, [rope, mod.head_dim - rope], dim=-1)
        k = mod.k_norm(mod.wk(hs)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [rope, mod.head_dim - rope], dim=-1)
        cos, sin = captured["pos_emb"]
        q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        weights = mod.weights_proj(hs.to(mod.weights_proj.weight.dtype)).float() * mod.n_heads**-0.5
    return q, k, weights, mod.softmax_scale


def transformers_version() -> tuple[int, ...]:
    import transformers

    return tuple(int(p) for p in transformers.__version__.split(".")[:2])
