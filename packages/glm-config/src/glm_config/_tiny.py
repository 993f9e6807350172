"""A tiny GLM-5.1-shaped checkpoint folder, for serving tests without the real weights.

GLM-5.1 (``GlmMoeDsaForCausalLM``) keeps its attention and indexer shapes here, because those are
what the DSA backends, the KV pool and the indexer kernels see: 64 heads, ``kv_lora_rank`` 512,
rope 64, nope 192, v 256, 32 indexer heads of 128, ``index_topk`` 2048. Everything that only
scales the model shrinks: hidden 1024, a few layers, a few small experts, a 258-token byte-level
vocabulary. The folder holds ``config.json``, a tokenizer and, with ``weights=True``, seeded
random weights in safetensors: transformers' own initialisation (normal, std 0.02, norms 1) with
the tensors of :data:`TINY_SHARPEN` scaled up, so that what the model says depends on what it
attends to. A served contamination check needs that: it compares each request's answer alone
and in a batch, and a model whose answer ignores the context cannot show a leak.

At transformers' scale the model is nearly a bigram model: the served tiny model answered all 8
of ``cpkv-validate``'s prompts (one shared prefix, a distinct marker each, the same last words)
with the same 32 tokens on an H100 (2026-12-07), and transformers does the same on CPU. SGLang's
``--load-format dummy`` is worse: U(-0.001, 0.001) everywhere, norms included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["TINY_BOS", "TINY_EOS", "TINY_SHARPEN", "tiny_glm51_config", "write_tiny_checkpoint"]

TINY_BOS, TINY_EOS = 256, 257
"""Special token ids after the 256 byte tokens."""

TINY_SHARPEN: dict[str, float] = {
    "embed_tokens": 20.0,
    "self_attn.q_b_proj": 4.0,
    "self_attn.kv_b_proj": 4.0,
    "self_attn.o_proj": 8.0,
    "lm_head": 4.0,
}
"""Factors on transformers' initial weights, by name fragment: larger query and key projections
make each head attend to a few tokens instead of averaging the context (which prompts sharing a
long prefix have in common), though not to one: at 8 times (scores 64 times sharper) rounding
alone changes which token a head picks, and fp32 and bf16 then answer 4 of 4 prompts
confidently differently (the likely cause of the unattributed differences a batch of 8 showed
beside batch size 1 on the H100, 2026-12-07).
A larger output projection lets what the heads read reach the residual stream,
larger embeddings keep the current token from drowning in it, and a larger ``lm_head`` spreads
the logits, so that the top two usually differ by more than ``cpkv-validate``'s drift margin
(0.1 nats) and a changed token counts as a leak, not as drift. MLA caches the latent below these
projections, so the KV pool's values (and fp8's range) keep their scale."""


def tiny_glm51_config(
    *, layers: int = 4, experts: int = 8, max_positions: int = 65536
) -> dict[str, Any]:
    """``config.json`` of the tiny model: GLM-5.1's attention and indexer, a small body.

    Args:
        layers: decoder layers (the first is dense, the rest MoE), plus one NextN layer.
        experts: routed experts per MoE layer (2 active, 1 shared).
        max_positions: the longest context the config admits.
    """
    if layers < 2 or experts < 2 or max_positions < 2048:
        raise ValueError(
            f"tiny checkpoint needs layers >= 2 (one dense, one MoE), experts >= 2 and "
            f"max_positions >= index_topk (2048); got {layers}, {experts}, {max_positions}"
        )
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "torch_dtype": "bfloat16",
        "vocab_size": TINY_EOS + 1,
        "bos_token_id": TINY_BOS,
        "eos_token_id": TINY_EOS,
        "tie_word_embeddings": False,
        "hidden_size": 1024,
        "intermediate_size": 1024,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": max_positions,
        "rope_theta": 1_000_000,
        "attention_bias": False,
        "num_hidden_layers": layers,
        "num_nextn_predict_layers": 1,
        # GLM-5.1's MLA attention
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 512,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "head_dim": 64,
        # GLM-5.1's lightning indexer
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 32,
        # a small MoE body
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_routed_experts": experts,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "moe_intermediate_size": 256,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "ep_size": 1,
    }


def write_tiny_checkpoint(
    path: str | Path,
    *,
    weights: bool = False,
    sharpen: dict[str, float] | None = None,
    **config: Any,
) -> Path:
    """Write the tiny model's folder (``config.json`` + a byte-level BPE tokenizer) at ``path``.

    Every byte is one token (no merges), so a prompt of N ASCII characters is N tokens: prompt
    lengths in tokens are exact, which the serving benchmarks rely on. Needs ``tokenizers`` and
    ``transformers`` (the ``transformers`` extra).

    Args:
        path: the folder, created if missing; an existing ``config.json`` there is replaced.
        weights: also write random bf16 weights (``model.safetensors``, built by transformers'
            ``GlmMoeDsaForCausalLM``; needs torch), seeded, so two calls write the same model.
        sharpen: factors on the initial weights by name fragment; ``None`` is
            :data:`TINY_SHARPEN`, ``{}`` keeps transformers' scale.
        **config: passed to :func:`tiny_glm51_config`.

    Returns:
        The folder.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = tiny_glm51_config(**config)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab |= {"<s>": TINY_BOS, "</s>": TINY_EOS}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    text = json.dumps(cfg, indent=1) + "\n"
    (folder / "config.json").write_text(text)
    if weights:
        _write_random_weights(folder, TINY_SHARPEN if sharpen is None else sharpen)
        # save_pretrained wrote config.json from transformers' config object: keep ours
        (folder / "config.json").write_text(text)
    return folder


def sharpen_weights(model: Any, factors: dict[str, float]) -> Any:
    """Scale, in place, each of ``model``'s parameters whose name holds a key of ``factors``
    (see :data:`TINY_SHARPEN`); returns ``model``."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            for fragment, factor in factors.items():
                if fragment in name:
                    param.mul_(factor)
    return model


def _write_random_weights(folder: Path, sharpen: dict[str, float]) -> None:
    """transformers' model with one more layer, whose weights become the NextN layer's decoder
    (``model.layers.<layers>.*``, where released GLM-5 checkpoints keep it and SGLang's NextN
    loader looks), plus the NextN-only tensors (``eh_proj``, ``enorm``, ``hnorm``,
    ``shared_head.norm``): without them EAGLE's draft would run on uninitialised memory."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    raw = json.loads((folder / "config.json").read_text())
    layers, hidden = raw["num_hidden_layers"], raw["hidden_size"]
    # built afresh: transformers derives per-layer lists (the indexer's) from the layer count
    cfg = AutoConfig.for_model(raw.pop("model_type"), **{**raw, "num_hidden_layers": layers + 1})
    model = sharpen_weights(AutoModelForCausalLM.from_config(cfg), sharpen).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="100GB")
    tensors = load_file(folder / "model.safetensors")
    nextn = f"model.layers.{layers}"
    tensors[f"{nextn}.eh_proj.weight"] = (torch.randn(hidden, 2 * hidden) * 0.02).bfloat16()
    for norm in ("enorm", "hnorm", "shared_head.norm"):
        tensors[f"{nextn}.{norm}.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
