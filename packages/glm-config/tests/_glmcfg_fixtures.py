"""config.json fixtures shaped like the shipped GLM-5.x / DeepSeek-V3.2 ones, and what each
transformers release is known to do to them (checked in the released sources)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

LAYERS = 78


def _glm(**extra: Any) -> dict[str, Any]:
    base = {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
        "dtype": "bfloat16", "first_k_dense_replace": 3,
        "head_dim": 192,  # GLM-5.x files carry head_dim 192; 5.4-5.9 alias it onto qk_rope_head_dim
        "hidden_act": "silu", "hidden_size": 6144, "index_head_dim": 128, "index_n_heads": 32,
        "index_topk": 2048, "intermediate_size": 12288, "kv_lora_rank": 512,
        "max_position_embeddings": 202752, "moe_intermediate_size": 2048, "n_group": 1,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 64,
        "num_experts_per_tok": 8, "num_hidden_layers": LAYERS, "num_key_value_heads": 64,
        "num_nextn_predict_layers": 1, "q_lora_rank": 2048, "qk_head_dim": 256,
        "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
        "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
        "v_head_dim": 256, "vocab_size": 154880,
    }  # fmt: skip
    base.update(extra)
    return base


def _dsv32(**extra: Any) -> dict[str, Any]:
    base = {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
        "hidden_size": 7168, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
        "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
        "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "topk_group": 4, "v_head_dim": 128, "vocab_size": 129280,
    }  # fmt: skip
    base.update(extra)
    return base


def _types(freq: int, offset: int, layers: int = LAYERS) -> list[str]:
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(layers)]


CONFIGS: dict[str, dict[str, Any]] = {
    "glm5_plain": _glm(),
    "glm5_freq4": _glm(index_topk_freq=4),
    "glm5_freq4_offset2": _glm(index_topk_freq=4, index_skip_topk_offset=2),
    "glm52_freq4_offset3": _glm(index_topk_freq=4, index_skip_topk_offset=3),
    "glm52_shipped": _glm(
        index_topk_freq=4,
        index_skip_topk_offset=3,
        index_topk_pattern=None,
        indexer_types=_types(4, 3),
        index_share_for_mtp_iteration=True,
    ),
    "glm_pattern": _glm(index_topk_pattern="FFF" + "SSSF" * 18 + "SSS"),
    "glm_no_qk_head_dim": {k: v for k, v in _glm(index_topk_freq=4).items() if k != "qk_head_dim"},
    "dsv32_plain": _dsv32(),
    "dsv32_freq4": _dsv32(index_topk_freq=4, index_skip_topk_offset=2),
}

# Fields normalize must repair, per config, for the two release families CI runs:
# 5.6-5.9 (drops freq/pattern, ignores the offset, aliases head_dim) and 5.11+ (right).
BROKEN_5_6_TO_5_9: dict[str, set[str]] = {
    "glm5_plain": {"qk_rope_head_dim"},
    "glm5_freq4": {"qk_rope_head_dim", "index_topk_freq"},
    "glm5_freq4_offset2": {"qk_rope_head_dim", "index_topk_freq"},
    "glm52_freq4_offset3": {"qk_rope_head_dim", "index_topk_freq", "indexer_types"},
    "glm52_shipped": {"qk_rope_head_dim"},  # shipped indexer_types wins; freq is kept with it
    "glm_pattern": {"qk_rope_head_dim", "index_topk_pattern"},
    "glm_no_qk_head_dim": {"qk_rope_head_dim", "index_topk_freq"},  # qk_head_dim computed pre-alias
    "dsv32_plain": set(),
    "dsv32_freq4": set(),
}
RIGHT_FROM_5_11: dict[str, set[str]] = {name: set() for name in CONFIGS}


def raw(name: str) -> dict[str, Any]:
    return copy.deepcopy(CONFIGS[name])


def write_model(tmp: Path, name: str, *, indent: int = 2) -> Path:
    """A model directory holding only config.json."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIGS[name], indent=indent) + "\n")
    return d


def version_family() -> str | None:
    """'broken' for transformers 5.6-5.9, 'right' for 5.11+, None for releases CI does not run."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    if (5, 6) <= (major, minor) < (5, 10):
        return "broken"
    if (major, minor) >= (5, 11):
        return "right"
    return None


def load(model_dir: Path):
    """Load as the installed transformers would; DeepSeek-V3.2 through DeepseekV3Config where the
    release has no deepseek_v32 (how stacks on those releases load it)."""
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except (ValueError, KeyError):
        data = json.loads((model_dir / "config.json").read_text())
        if data.get("model_type") != "deepseek_v32":
            raise
        fields = {k: v for k, v in data.items() if k not in ("model_type", "architectures")}
        return transformers.DeepseekV3Config(**fields)
