"""The tiny GLM-5.1-shaped checkpoint the GPU serve suite starts SGLang on loads in transformers.

Real transformers: ``AutoConfig`` builds a ``GlmMoeDsaConfig`` from the folder, the model class
instantiates from it on the meta device (every weight shape is consistent), the tokenizer
round-trips bytes one token each, and glm-config's own checks find the DSA fields GLM-5.1 has.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from glm_config import (
    TINY_SHARPEN,
    config_errors,
    expected_settings,
    tiny_glm51_config,
    write_tiny_checkpoint,
)
from packaging.version import Version

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), layers=3, experts=4)


def test_the_config_loads_as_glm_moe_dsa(folder):
    cfg = transformers.AutoConfig.from_pretrained(folder)
    assert type(cfg).__name__ == "GlmMoeDsaConfig"
    assert (cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim) == (64, 512, 64)
    assert (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk) == (32, 128, 2048)
    assert cfg.num_hidden_layers == 3 and cfg.n_routed_experts == 4


def test_the_model_class_builds_from_it(folder):
    cfg = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert type(model).__name__ == "GlmMoeDsaForCausalLM"
    assert len(model.model.layers) == 3
    attn = model.model.layers[0].self_attn
    # the MLA up-projection carries GLM-5.1's per-head nope + v widths for all 64 heads
    assert attn.kv_b_proj.weight.shape == (64 * (192 + 256), 512)


_TOKENIZE = """
import json, sys, transformers
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
ids = tok(sys.argv[2], add_special_tokens=False)["input_ids"]
print(json.dumps([ids, tok.decode(ids), tok.bos_token_id, tok.eos_token_id]))
"""


def test_the_tokenizer_is_one_token_per_byte(folder):
    # In a fresh interpreter, as a server loads it: a tokenizers thread pool left in this pytest
    # process crashed its exit (SIGSEGV after every test passed) on the 2-core CI machine.
    text = "MARK03x1a2b: the quick brown fox"
    proc = subprocess.run(
        [sys.executable, "-c", _TOKENIZE, str(folder), text],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    ids, decoded, bos, eos = json.loads(proc.stdout)
    assert len(ids) == len(text.encode())
    assert decoded == text
    assert (bos, eos) == (256, 257)


def test_glm_config_reads_it_as_dsa(folder):
    raw = json.loads((folder / "config.json").read_text())
    assert config_errors(raw) == []
    settings = expected_settings(raw)
    assert settings.num_hidden_layers == 3 and settings.qk_rope_head_dim == 64


@pytest.mark.parametrize("bad", [{"layers": 1}, {"experts": 1}, {"max_positions": 1024}])
def test_sizes_that_cannot_make_the_model_are_refused(bad):
    with pytest.raises(ValueError, match="tiny checkpoint needs"):
        tiny_glm51_config(**bad)


@pytest.mark.slow
def test_random_weights_load_back_at_transformers_scale_sharpened(tmp_path):
    """``weights=True``: the folder loads back into the model class with no weight missing and
    none left over but the NextN layer's, bf16, at transformers' initialisation scale (std 0.02,
    not SGLang's dummy U(-0.001, 0.001)) times :data:`TINY_SHARPEN` where it names the tensor;
    the experts are saved one by one, as released checkpoints hold them."""
    from safetensors import safe_open

    folder = write_tiny_checkpoint(tmp_path, weights=True, layers=2, experts=2)
    cfg = transformers.AutoConfig.from_pretrained(folder)
    assert cfg.index_topk == 2048  # our config.json, not save_pretrained's rewrite
    _, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    # transformers has no NextN layer: its weights (layer 2 here) are all it leaves over
    assert not info["missing_keys"], info
    assert info["unexpected_keys"] and all(
        k.startswith("model.layers.2.") for k in info["unexpected_keys"]
    ), info
    with safe_open(folder / "model.safetensors", "pt") as f:
        names = list(f.keys())
        w = f.get_tensor("model.layers.0.self_attn.kv_b_proj.weight")
        plain = f.get_tensor("model.layers.0.mlp.gate_proj.weight")
    # released checkpoints (and SGLang's loader) name each expert; transformers 5.8 saves them
    # fused, the lock's 5.19 and the GPU box's 5.17 one by one
    # the NextN layer SGLang's EAGLE draft loads: a whole decoder layer and its own tensors
    for name in ("eh_proj.weight", "enorm.weight", "shared_head.norm.weight",
                 "self_attn.kv_b_proj.weight", "self_attn.indexer.wk.weight"):  # fmt: skip
        assert f"model.layers.2.{name}" in names, name
    if Version(transformers.__version__) >= Version("5.17"):
        assert "model.layers.1.mlp.experts.1.down_proj.weight" in names
    assert w.dtype == plain.dtype == torch.bfloat16
    assert 0.01 < float(plain.float().std()) < 0.04  # no factor for the MLP
    factor = TINY_SHARPEN["self_attn.kv_b_proj"]
    assert 0.01 * factor < float(w.float().std()) < 0.04 * factor
