"""The config-repair hook on HfModelConfigParser.parse (glm_config.normalize)."""

from __future__ import annotations

import _sglang_env as env
import pytest
from sglang_cpkv.plugin import _decisions

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]


def _glm52_like(tmp_path):
    """The fixture with GLM-5.2's IndexCache fields (freq 4, offset 3) in config.json."""
    import json

    raw = json.loads((env.GLM51_DIR / "config.json").read_text())
    raw.update(index_topk_freq=4, index_skip_topk_offset=3)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path, raw


def test_config_repair_is_a_noop_on_transformers_5_19(plugin, tmp_path):
    import transformers
    from sglang.srt.arg_groups.overrides import model_config_of
    from sglang.srt.utils.hf_transformers.config import HfModelConfigParser, get_config

    assert transformers.__version__ == "5.19.0"
    model_dir, _ = _glm52_like(tmp_path)
    get_config.cache_clear()
    sa = env.resolve(["--model-path", str(model_dir), "--tp", "8"], env.SM90)
    config_decisions = _decisions.decisions("config")  # one per parse (SGLang parses it twice)
    assert config_decisions
    assert {d.message for d in config_decisions} == {"DSA config already matches config.json"}
    hooked = model_config_of(sa).hf_config
    assert env.full_layers(hooked) == [0, 1, 2, *range(6, 78, 4)]
    plain = HfModelConfigParser.parse.__wrapped__(HfModelConfigParser(), str(model_dir), True)
    for name in (
        "index_topk_freq",
        "index_skip_topk_offset",
        "qk_rope_head_dim",
        "qk_head_dim",
        "indexer_types",
    ):
        assert getattr(hooked, name) == getattr(plain, name), name


def test_config_repair_restores_what_older_transformers_drop(plugin, tmp_path):
    """A config as transformers 5.6-5.8 build it (fields dropped, offset ignored) is repaired."""
    from sglang_cpkv.plugin.hooks.config_repair import repair
    from transformers import AutoConfig

    model_dir, raw = _glm52_like(tmp_path)
    config = AutoConfig.from_pretrained(model_dir)
    del config.index_topk_freq, config.index_skip_topk_offset
    config.indexer_types = ["full" if max(i - 1, 0) % 4 == 0 else "shared" for i in range(78)]
    _decisions.clear()
    report = repair(config, raw)
    assert report.changed
    assert (config.index_topk_freq, config.index_skip_topk_offset) == (4, 3)
    assert env.full_layers(config) == [0, 1, 2, *range(6, 78, 4)]
    messages = [d.message for d in _decisions.decisions("config")]
    assert "index_topk_freq: <missing> -> 4" in messages
    assert "indexer_types rebuilt from config.json (21 full)" in messages
