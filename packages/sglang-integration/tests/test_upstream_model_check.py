"""``_model_check`` and ``_machine`` decide as sglang 0.5.23, transformers and torch do.

- ``DSA_ARCHITECTURES`` is the set of registered architectures SGLang's ``is_deepseek_dsa`` calls
  DSA, and ``is_dsa_config`` agrees with it on every config.json the DSA-field rule is about;
- the reason a DSA config.json must set its DSA fields: transformers 5.19 fills a missing one with
  GLM-5's default, silently;
- ``cuda_device_count`` (driver API, no torch) counts what ``torch.cuda.device_count`` counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import _sglang_env as env
import pytest
from sglang_cpkv.serve._machine import cuda_device_count
from sglang_cpkv.serve._model_check import DSA_ARCHITECTURES, DSA_FIELDS, is_dsa_config

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]
GLM = json.loads((env.GLM51_DIR / "config.json").read_text())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # every model module is imported
def test_dsa_architectures_are_sglangs():
    from sglang.srt.configs.model_config import is_deepseek_dsa
    from sglang.srt.models.registry import ModelRegistry

    archs = ModelRegistry.get_supported_archs()
    sglang = {a for a in archs if is_deepseek_dsa({"architectures": [a], "index_topk": 2048})}
    assert sglang == DSA_ARCHITECTURES


@pytest.mark.parametrize(
    "config",
    [
        GLM,
        {**GLM, "architectures": ["LlamaForCausalLM"]},
        {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"},
        {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
         "index_topk": 2048},
        {"architectures": ["LongcatFlashForCausalLM"], "index_topk": 512},
        {"architectures": ["Qwen3ForCausalLM"], "index_topk": 2048},
        {"architectures": [], "index_topk": 2048},
    ],
    ids=["glm51", "glm-fields-llama-arch", "deepseek-v3", "deepseek-v32", "longcat",
         "qwen+topk", "no-arch"],
)  # fmt: skip
def test_is_dsa_config_is_sglangs_on_config_json(config):
    from sglang.srt.configs.model_config import is_deepseek_dsa

    assert is_dsa_config(config) == is_deepseek_dsa(config)


def test_transformers_fills_missing_dsa_fields_with_defaults(tmp_path: Path):
    """Why a DSA config.json must set DSA_FIELDS: transformers 5.19 fills GLM-5's silently."""
    from transformers import AutoConfig

    raw = {k: v for k, v in GLM.items() if k not in DSA_FIELDS[1:]}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert all(getattr(loaded, f, None) is not None for f in DSA_FIELDS)


def test_cuda_device_count_is_torchs():
    import torch

    assert cuda_device_count() == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
