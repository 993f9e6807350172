"""GEMM shapes of a DeepSeek-V3.2-style layer (MLA attention, DSA indexer, MoE) on one rank.

``(N, K)`` is the weight SGLang 0.5.23 hands DeepGEMM: rows = output features on this rank,
columns = input features on this rank. GLM-5.1 by default (its config.json: hidden_size 6144,
intermediate_size 12288, moe_intermediate_size 2048, n_routed_experts 256, n_shared_experts 1,
num_attention_heads 64, q_lora_rank 2048, kv_lora_rank 512, qk_nope_head_dim 192,
qk_rope_head_dim 64, v_head_dim 256, index_n_heads 32, index_head_dim 128).

Rows under DSA prefill CP (:class:`~deepgemm_compat._shapes.Rows`), as SGLang 0.5.23 places them
(held equal to SGLang's layer-boundary stage plan and modules in
``sglang-integration/tests/test_upstream_cp_ffn_rows.py``):

* attention ``fused_qkv_a_proj``, ``q_b_proj``, ``o_proj`` and indexer ``wq_b``, ``wk``: the
  attention stage reads this rank's CP shard, so ``cp_local``. Attention weights split over
  attention TP (``tp / (attn_dp * cp)``: 1 at tp 8, cp 8); the indexer's are replicated.
* ``kv_b_proj``: a GEMM only in the MHA prefill paths, over KV rows (the cached prefix
  included); SGLang turns MHA off under DSA prefill CP. ``gathered``: never capped.
* dense MLP (the first ``first_k_dense_replace`` layers) and shared expert: the FFN input is
  all-gathered over attention CP, unless the MLP is replicated (``--moe-dense-tp-size 1``) or the
  MoE has an all-to-all backend (DeepEP: the shared expert is then replicated and stays on the
  rank's rows). The plan does not rely on those placements: ``gathered``.
* routed experts: grouped kernels over the all-to-all re-gathered tokens.

Not DeepGEMM GEMMs in GLM-5.1-FP8, so not listed: NextN ``eh_proj`` (a bf16 ``nn.Linear`` unless
the checkpoint is quark), indexer ``weights_proj`` (bf16) and, on CUDA with GLM's non-neox
indexer rope, ``wk``, fused with ``weights_proj`` into one bf16 GEMM (``wk`` stays listed for
settings that keep it fp8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepgemm_compat._shapes import GemmShape, KernelType, Rows

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
ATTENTION_KEYS = (
    "hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim",
)  # fmt: skip
INDEXER_KEYS = ("index_n_heads", "index_head_dim")
FFN_KEYS = (
    "hidden_size", "intermediate_size", "moe_intermediate_size", "n_shared_experts",
    "n_routed_experts",
)  # fmt: skip

_DENSE = KernelType.GEMM_NT_F8F8BF16
_CONTIG = KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG
_MASKED = KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
_LOCAL, _GATHERED = Rows.CP_LOCAL, Rows.GATHERED


def _ints(config: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for key in keys:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"model config {key} must be a positive int, got {value!r}")
        out[key] = value
    return out


def _divides(label: str, value: int, total: int, what: str) -> None:
    if not isinstance(value, int) or value < 1 or total % value:
        raise ValueError(f"{label}={value!r} must be >= 1 and divide {what} ({total})")


def dsa_attention_shapes(config: Mapping[str, Any], attn_tp: int = 1) -> list[GemmShape]:
    """Block-FP8 attention GEMMs of one layer on one rank (indexer ones when the config has them).

    Args:
        config: the model config's fields (:data:`ATTENTION_KEYS`, optionally
            :data:`INDEXER_KEYS`).
        attn_tp: attention TP size; heads split over it.

    Raises:
        ValueError: a field is missing or not a positive int, or ``attn_tp`` does not divide the
            heads.
    """
    c = _ints(config, ATTENTION_KEYS)
    h, heads = c["hidden_size"], c["num_attention_heads"]
    _divides("attn_tp", attn_tp, heads, "num_attention_heads")
    local_heads, nope, rope = heads // attn_tp, c["qk_nope_head_dim"], c["qk_rope_head_dim"]
    q_lora, kv_lora, v = c["q_lora_rank"], c["kv_lora_rank"], c["v_head_dim"]
    shapes = [
        GemmShape(_DENSE, q_lora + kv_lora + rope, h, 1, "attn.fused_qkv_a_proj", _LOCAL),
        GemmShape(_DENSE, local_heads * (nope + rope), q_lora, 1, "attn.q_b_proj", _LOCAL),
        GemmShape(_DENSE, local_heads * (nope + v), kv_lora, 1, "attn.kv_b_proj", _GATHERED),
        GemmShape(_DENSE, h, local_heads * v, 1, "attn.o_proj", _LOCAL),
    ]
    if all(config.get(key) is not None for key in INDEXER_KEYS):
        ix = _ints(config, INDEXER_KEYS)
        n_heads, head_dim = ix["index_n_heads"], ix["index_head_dim"]
        shapes += [
            GemmShape(_DENSE, n_heads * head_dim, q_lora, 1, "indexer.wq_b", _LOCAL),
            GemmShape(_DENSE, head_dim, h, 1, "indexer.wk", _LOCAL),
        ]
    return shapes


def dsa_ffn_shapes(
    config: Mapping[str, Any],
    *,
    dense_tp: int = 8,
    shared_tp: int = 1,
    ep: int = 8,
    moe: str = "contiguous",
) -> list[GemmShape]:
    """Block-FP8 FFN GEMMs on one rank: dense MLP, shared expert (``gathered``), routed experts.

    Args:
        config: the model config's fields (:data:`FFN_KEYS`).
        dense_tp: TP of the dense MLP: SGLang's ``--moe-dense-tp-size`` (1), else the TP size.
        shared_tp: TP of the shared expert: 1 with an all-to-all MoE backend (DeepEP) or
            ``SGLANG_SHARED_EXPERT_TP1``, else the TP size.
        ep: expert parallelism; each rank holds ``n_routed_experts / ep`` experts.
        moe: ``"contiguous"`` (prefill, DeepEP normal), ``"masked"`` (decode, low latency)
            or ``"both"``.
    """
    c = _ints(config, FFN_KEYS)
    h, moe_inter = c["hidden_size"], c["moe_intermediate_size"]
    shared = moe_inter * c["n_shared_experts"]
    _divides("dense_tp", dense_tp, c["intermediate_size"], "intermediate_size")
    _divides("shared_tp", shared_tp, shared, "the shared experts' intermediate size")
    _divides("ep", ep, c["n_routed_experts"], "n_routed_experts")
    if moe not in ("contiguous", "masked", "both"):
        raise ValueError(f"moe must be 'contiguous', 'masked' or 'both', got {moe!r}")
    inter = c["intermediate_size"] // dense_tp
    shared //= shared_tp
    shapes = [
        GemmShape(_DENSE, 2 * inter, h, 1, "mlp.gate_up_proj", _GATHERED),
        GemmShape(_DENSE, h, inter, 1, "mlp.down_proj", _GATHERED),
        GemmShape(_DENSE, 2 * shared, h, 1, "shared_expert.gate_up_proj", _GATHERED),
        GemmShape(_DENSE, h, shared, 1, "shared_expert.down_proj", _GATHERED),
    ]
    groups = c["n_routed_experts"] // ep
    kinds = {"contiguous": (_CONTIG,), "masked": (_MASKED,), "both": (_CONTIG, _MASKED)}[moe]
    for kind in kinds:
        shapes += [
            GemmShape(kind, 2 * moe_inter, h, groups, "moe.gate_up_proj"),
            GemmShape(kind, h, moe_inter, groups, "moe.down_proj"),
        ]
    return shapes


def glm51_shapes(
    *,
    attn_tp: int = 1,
    dense_tp: int = 8,
    shared_tp: int = 1,
    ep: int = 8,
    moe: str = "contiguous",
    config: dict | None = None,
) -> list[GemmShape]:
    """Block-FP8 GEMMs of GLM-5.1 on one rank. The defaults are a tp 8, attention-CP 8 prefill
    node with DeepEP (EP 8) and SGLang's default dense-MLP TP.

    Args:
        attn_tp: attention TP (1 under CP 8 at tp 8, where each rank holds every head).
        dense_tp, shared_tp, ep, moe: see :func:`dsa_ffn_shapes`.
        config: override any :data:`GLM51` value (e.g. for GLM-5.2).
    """
    c = {**GLM51, **(config or {})}
    ffn = dsa_ffn_shapes(c, dense_tp=dense_tp, shared_tp=shared_tp, ep=ep, moe=moe)
    return dsa_attention_shapes(c, attn_tp) + ffn


def glm51_reduced_shapes(ep: int = 8) -> list[GemmShape]:
    """A small GLM-5.1 subset for timing a cold-cache warmup: two dense, one grouped."""
    by_name = {s.name: s for s in glm51_shapes(ep=ep)}
    return [
        by_name["indexer.wq_b"],
        by_name["shared_expert.down_proj"],
        by_name["moe.gate_up_proj"],
    ]
