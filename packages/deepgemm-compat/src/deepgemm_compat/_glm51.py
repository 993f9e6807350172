"""GLM-5.1 (GlmMoeDsaForCausalLM) GEMM shapes as DeepGEMM sees them on one rank.

Numbers from GLM-5.1's config.json: hidden_size 6144, intermediate_size 12288,
moe_intermediate_size 2048, n_routed_experts 256, n_shared_experts 1,
num_experts_per_tok 8, num_hidden_layers 78, first_k_dense_replace 3,
num_attention_heads 64, q_lora_rank 2048, kv_lora_rank 512, qk_nope_head_dim 192,
qk_rope_head_dim 64, v_head_dim 256, index_n_heads 32, index_head_dim 128,
num_nextn_predict_layers 1.
"""

from __future__ import annotations

from deepgemm_compat._shapes import GemmShape, KernelType

GLM51 = {
    "hidden_size": 6144,
    "intermediate_size": 12288,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "num_attention_heads": 64,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_n_heads": 32,
    "index_head_dim": 128,
}

_DENSE = KernelType.GEMM_NT_F8F8BF16
_CONTIG = KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG
_MASKED = KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED


def glm51_shapes(
    *,
    attn_tp: int = 1,
    dense_tp: int = 1,
    ep: int = 8,
    moe: str = "contiguous",
    draft: bool = False,
    config: dict | None = None,
) -> list[GemmShape]:
    """Block-FP8 GEMMs of GLM-5.1 on one rank.

    Args:
        attn_tp: tensor parallelism over attention heads (1 under CP, where each rank
            holds every head).
        dense_tp: tensor parallelism of the dense MLP and the shared expert.
        ep: expert parallelism; each rank holds ``n_routed_experts / ep`` experts.
        moe: ``"contiguous"`` (prefill, DeepEP normal), ``"masked"`` (decode, low latency)
            or ``"both"``.
        draft: add the NextN (MTP) draft layer's own GEMM (``eh_proj``).
        config: override any GLM51 value (e.g. for GLM-5.2).
    """
    c = {**GLM51, **(config or {})}
    h, heads = c["hidden_size"], c["num_attention_heads"]
    for label, value, total in (("attn_tp", attn_tp, heads), ("ep", ep, c["n_routed_experts"])):
        if value < 1 or total % value:
            raise ValueError(f"{label}={value} must be >= 1 and divide {total}")
    for label, value, total in (("dense_tp", dense_tp, c["intermediate_size"]),):
        if value < 1 or total % value:
            raise ValueError(f"{label}={value} must be >= 1 and divide {total}")
    if moe not in ("contiguous", "masked", "both"):
        raise ValueError(f"moe must be 'contiguous', 'masked' or 'both', got {moe!r}")
    local_heads = heads // attn_tp
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    inter, moe_inter = c["intermediate_size"] // dense_tp, c["moe_intermediate_size"]
    shared = moe_inter * c["n_shared_experts"] // dense_tp
    shapes = [
        GemmShape(
            _DENSE,
            c["q_lora_rank"] + c["kv_lora_rank"] + c["qk_rope_head_dim"],
            h,
            1,
            "attn.fused_qkv_a_proj",
        ),
        GemmShape(_DENSE, local_heads * qk, c["q_lora_rank"], 1, "attn.q_b_proj"),
        GemmShape(
            _DENSE,
            local_heads * (c["qk_nope_head_dim"] + c["v_head_dim"]),
            c["kv_lora_rank"],
            1,
            "attn.kv_b_proj",
        ),
        GemmShape(_DENSE, h, local_heads * c["v_head_dim"], 1, "attn.o_proj"),
        GemmShape(
            _DENSE, c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"], 1, "indexer.wq_b"
        ),
        GemmShape(_DENSE, c["index_head_dim"], h, 1, "indexer.wk"),
        GemmShape(_DENSE, 2 * inter, h, 1, "mlp.gate_up_proj"),
        GemmShape(_DENSE, h, inter, 1, "mlp.down_proj"),
        GemmShape(_DENSE, 2 * shared, h, 1, "shared_expert.gate_up_proj"),
        GemmShape(_DENSE, h, shared, 1, "shared_expert.down_proj"),
    ]
    groups = c["n_routed_experts"] // ep
    kinds = {"contiguous": (_CONTIG,), "masked": (_MASKED,), "both": (_CONTIG, _MASKED)}[moe]
    for kind in kinds:
        shapes += [
            GemmShape(kind, 2 * moe_inter, h, groups, "moe.gate_up_proj"),
            GemmShape(kind, h, moe_inter, groups, "moe.down_proj"),
        ]
    if draft:
        shapes.append(GemmShape(_DENSE, h, 2 * h, 1, "nextn.eh_proj"))
    return shapes


def glm51_reduced_shapes(ep: int = 8) -> list[GemmShape]:
    """A small GLM-5.1 subset for timing a cold-cache warmup: two dense, one grouped."""
    by_name = {s.name: s for s in glm51_shapes(ep=ep)}
    return [
        by_name["indexer.wq_b"],
        by_name["shared_expert.down_proj"],
        by_name["moe.gate_up_proj"],
    ]
