"""indexcache's schedule held equal to SGLang 0.5.23's own per-layer rule, on SGLang's own configs.

SGLang decides per layer with ``configs.model_config.dsa_layer_skips_topk(config, layer)``:
``DeepseekV2AttentionMLA.__init__`` sets ``skip_topk`` from it for ``layer_id`` and
``next_skip_topk`` for ``layer_id + 1``. Every test here writes a ``config.json``, loads it with
SGLang's own config parser (``HfModelConfigParser.parse``: transformers 5.19's ``GlmMoeDsaConfig``
for GLM, which derives ``indexer_types``; SGLang's ``deepseek_v32`` alias, which keeps the raw
fields; ``LongcatFlashConfig``, which carries ``cli_factor``), calls ``dsa_layer_skips_topk`` on
the result, and holds :func:`indexcache.schedule_from_config` on the same object equal to it, or,
where we refuse, holds what the refusal says SGLang does ("run it as FFSS...", cli_factor's
layers and the fields it offers instead) to what SGLang does.

What is not called, and why: ``DeepseekV2AttentionMLA.__init__`` builds tensor-parallel linear
layers (initialised process groups, a quantisation config, SGLang's CUDA kernel modules), and the
model forwards need the whole runtime. Its two flag lines are calls of ``dsa_layer_skips_topk``,
which we call directly; those lines, and the data flow the last-layer decision rests on, are read
from the installed source by ``ast`` (importing the model modules takes ~50 s on CPU) and checked
as tripwires that fail when an SGLang release changes them. ``IndexTopKShareState``, the carry
SGLang's NextN starts from, runs on CPU and is called.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import tempfile
from types import SimpleNamespace

import _sglang_env as env
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from indexcache import IndexerSchedule, ScheduleError, schedule_from_config

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

EXAMPLES = 300 if os.environ.get("CI", "").lower() in {"1", "true", "yes"} else 60
FAMILIES = {  # model_type: architecture SGLang's is_deepseek_dsa accepts
    "glm_moe_dsa": "GlmMoeDsaForCausalLM",
    "deepseek_v32": "DeepseekV32ForCausalLM",
    "longcat_flash": "LongcatFlashForCausalLM",
}
READING = re.compile(r"SGLang 0\.5\.23 would accept it and run it as ([FS]+) ")


def sglang_load(family: str, layers: int, **fields):
    """The config object SGLang 0.5.23's parser builds from a minimal DSA config.json.

    The parser is unwrapped from any cpkv hook (the config-repair hook would apply indexcache's
    own checks, and this test holds indexcache to SGLang, not to itself).
    """
    from sglang.srt.utils.hf_transformers.config import HfModelConfigParser

    raw = {
        "model_type": family,
        "architectures": [FAMILIES[family]],
        "num_hidden_layers": layers,
        "num_layers": layers,  # LongCat's name for it
        "index_topk": 8,
        **{k: v for k, v in fields.items() if v is not None},
    }
    parse = inspect.unwrap(HfModelConfigParser.parse)
    with tempfile.TemporaryDirectory() as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(raw, f)
        return parse(HfModelConfigParser(), model_dir, False)


def sglang_skips(config, layer: int) -> bool:
    from sglang.srt.configs.model_config import dsa_layer_skips_topk

    return dsa_layer_skips_topk(config, layer)


def sglang_pattern(config) -> str:
    """``"FFSS..."``: SGLang's ``skip_topk`` for every main layer."""
    return "".join("S" if sglang_skips(config, i) else "F" for i in range(config.num_hidden_layers))


def assert_ours_equals_sglang(config) -> str:
    """Ours on SGLang's config object equals SGLang, or is refused saying what SGLang runs.

    Returns:
        ``"equal"`` or ``"refused"``, for the caller's table checks.
    """
    theirs, n = sglang_pattern(config), config.num_hidden_layers
    try:
        ours = schedule_from_config(config)
    except ScheduleError as exc:
        message = str(exc)
        reading = READING.search(message)
        assert reading, f"the refusal does not say what SGLang runs: {message}"
        assert reading.group(1) == theirs, message
        return "refused"
    assert ours.pattern == theirs
    # next_skip_topk = dsa_layer_skips_topk(config, layer_id + 1), below the last main layer
    assert [ours.next_layer_reuses(i) for i in range(n - 1)] == [
        sglang_skips(config, i + 1) for i in range(n - 1)
    ]
    assert not ours.next_layer_reuses(n - 1)  # see test_last_main_layer_*
    return "equal"


# freq/offset: every case at 78 and 92 layers, and random ones --------------------------------
FREQ_OFFSET = [(n, f, o) for n in (78, 92) for f in range(1, 9) for o in range(1, 6)]


@pytest.mark.parametrize("family", ["glm_moe_dsa", "deepseek_v32"])
@pytest.mark.parametrize(("layers", "freq", "offset"), FREQ_OFFSET)
def test_freq_offset_table(family, layers, freq, offset):
    config = sglang_load(family, layers, index_topk_freq=freq, index_skip_topk_offset=offset)
    assert assert_ours_equals_sglang(config) == "equal"


@given(
    family=st.sampled_from(["glm_moe_dsa", "deepseek_v32"]),
    layers=st.integers(1, 100),
    freq=st.none() | st.integers(1, 9),
    offset=st.none() | st.integers(1, 9),
)
@settings(max_examples=EXAMPLES, deadline=None)
def test_freq_offset_random(family, layers, freq, offset):
    config = sglang_load(family, layers, index_topk_freq=freq, index_skip_topk_offset=offset)
    assert assert_ours_equals_sglang(config) == "equal"


# Patterns, well formed or not ------------------------------------------------------------------
MALFORMED = {  # name: (num_hidden_layers, index_topk_pattern)
    "lowercase": (4, "FFss"),
    "lowercase_first": (4, "fFSS"),
    "junk_letter": (5, "FSxSF"),
    "starts_with_s": (4, "SFSF"),
    "short": (6, "FFS"),
    "long": (3, "FFSSS"),
    "long_with_s_past_the_end": (3, "FFFS"),
    "empty": (3, ""),
}


@pytest.mark.parametrize("family", ["glm_moe_dsa", "deepseek_v32"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_pattern_refusal_says_what_sglang_runs(family, case):
    layers, pattern = MALFORMED[case]
    raw = {"num_hidden_layers": layers, "index_topk_pattern": pattern}
    try:
        config = sglang_load(family, layers, index_topk_pattern=pattern)
    except KeyError as exc:  # transformers 5.19 maps each letter through {"F", "S"}
        assert family == "glm_moe_dsa"
        with pytest.raises(ScheduleError, match=f"GlmMoeDsaConfig raises KeyError {exc.args[0]!r}"):
            schedule_from_config(raw)
        return
    assert assert_ours_equals_sglang(config) == "refused"
    if family == "deepseek_v32":  # the raw dict reads the same as SGLang's object
        with pytest.raises(ScheduleError) as info:
            schedule_from_config(raw)
        assert READING.search(str(info.value)).group(1) == sglang_pattern(config)


@given(
    family=st.sampled_from(["glm_moe_dsa", "deepseek_v32"]),
    layers=st.integers(1, 12),
    pattern=st.text(alphabet="FSfsx", max_size=14),
    freq=st.none() | st.integers(1, 4),
)
@settings(max_examples=EXAMPLES, deadline=None)
def test_any_pattern_equals_sglang_or_refusal_says_what_it_runs(family, layers, pattern, freq):
    try:
        config = sglang_load(family, layers, index_topk_pattern=pattern, index_topk_freq=freq)
    except KeyError as exc:
        assert family == "glm_moe_dsa"
        with pytest.raises(ScheduleError, match=f"KeyError {exc.args[0]!r}"):
            schedule_from_config({"num_hidden_layers": layers, "index_topk_pattern": pattern})
        return
    assert_ours_equals_sglang(config)


# cli_factor (LongCat): refused by name; what the refusal says, checked against SGLang ----------
CLI_FACTOR = [(8, 3), (28, 2), (78, 4), (92, 3), (5, 9)]


@pytest.mark.parametrize(("layers", "cli_factor"), CLI_FACTOR)
def test_cli_factor_refusal_says_what_sglang_does(layers, cli_factor):
    c = cli_factor
    # "reads it ahead of index_topk_pattern and index_topk_freq": both set, cli_factor decides
    config = sglang_load(
        "deepseek_v32", layers, cli_factor=c, index_topk_pattern="F" * layers, index_topk_freq=2
    )
    theirs = sglang_pattern(config)
    # "attention layers 0, c, 2c, ... run their indexer"
    assert [i for i, x in enumerate(theirs) if x == "F"] == list(range(0, layers, c))
    with pytest.raises(ScheduleError) as info:
        schedule_from_config(config)
    message = str(info.value)
    assert f"cli_factor={c} is not supported" in message
    assert f"attention layers 0, {c}, {2 * c}, ... run their indexer" in message
    # the fix it offers runs the same layers in SGLang
    assert f"index_topk_freq={c} with index_skip_topk_offset=1" in message
    fixed = sglang_load("deepseek_v32", layers, index_topk_freq=c, index_skip_topk_offset=1)
    assert sglang_pattern(fixed) == theirs
    assert schedule_from_config(fixed).pattern == theirs


@given(
    family=st.sampled_from(["longcat_flash", "deepseek_v32"]),
    layers=st.integers(1, 60),
    cli_factor=st.none() | st.integers(1, 9),
    freq=st.none() | st.integers(1, 5),
)
@settings(max_examples=EXAMPLES, deadline=None)
def test_cli_factor_off_equals_sglang_and_on_is_refused(family, layers, cli_factor, freq):
    config = sglang_load(family, layers, cli_factor=cli_factor, index_topk_freq=freq)
    if cli_factor in (None, 1):  # off in SGLang too
        assert assert_ours_equals_sglang(config) == "equal"
        return
    with pytest.raises(ScheduleError, match=f"cli_factor={cli_factor} is not supported"):
        schedule_from_config(config)
    c = cli_factor
    assert sglang_pattern(config) == "".join("F" if i % c == 0 else "S" for i in range(layers))


def test_cli_factor_longcat_counts_two_mla_sublayers_per_decoder_layer():
    """Tripwire for "on LongCat those ids count two MLA sublayers per decoder layer"."""
    src, where = _source("sglang.srt.models.longcat_flash", "LongcatFlashDecoderLayer", "__init__")
    code = _code(src)
    assert "self.self_attn = nn.ModuleList( [ DeepseekV2AttentionMLA(" in code, where
    assert "layer_id=layer_id * 2 + i," in code and "for i in range(2)" in code, where


def test_cli_factor_on_a_glm_config_sglang_ignores_it():
    """Tripwire for "on a GLM config transformers 5.19 leaves it out of indexer_types"."""
    config = sglang_load("glm_moe_dsa", 8, cli_factor=3)
    assert config.cli_factor == 3 and sglang_pattern(config) == "F" * 8
    with pytest.raises(ScheduleError, match=r"transformers 5\.19 leaves it out of indexer_types"):
        schedule_from_config(config)


@pytest.mark.parametrize("value", [0, -2])
def test_cli_factor_sglang_asserts_on_and_we_refuse(value):
    config = sglang_load("longcat_flash", 8, cli_factor=value)
    with pytest.raises(AssertionError, match="cli_factor must be positive"):
        sglang_skips(config, 0)
    with pytest.raises(ScheduleError, match="stops on it with AssertionError 'cli_factor must be"):
        schedule_from_config(config)


# The last main layer's "next layer reuses" flag ------------------------------------------------
def test_last_main_layer_sglang_flag_is_the_formula_one_layer_past_the_model():
    """SGLang's next_skip_topk at layer 77 of (78, freq 2, offset 2) depends on the field used.

    The same schedule given as freq/offset says True (the formula at layer 78, which does not
    exist), given as indexer_types (what transformers hands SGLang for GLM) or as a pattern says
    False. Ours is False for all three; why is in ``IndexerSchedule.next_layer_reuses``.
    """
    raw_freq = sglang_load("deepseek_v32", 78, index_topk_freq=2, index_skip_topk_offset=2)
    glm_freq = sglang_load("glm_moe_dsa", 78, index_topk_freq=2, index_skip_topk_offset=2)
    pattern = sglang_pattern(raw_freq)
    raw_pattern = sglang_load("deepseek_v32", 78, index_topk_pattern=pattern)
    assert sglang_pattern(glm_freq) == sglang_pattern(raw_pattern) == pattern
    assert [sglang_skips(c, 78) for c in (raw_freq, glm_freq, raw_pattern)] == [True, False, False]
    for config in (raw_freq, glm_freq, raw_pattern):
        assert not schedule_from_config(config).next_layer_reuses(77)
        nextn = IndexerSchedule.from_pattern(pattern, num_nextn_layers=1)
        assert not nextn.next_layer_reuses(77)


def _source(module: str, *qualname: str) -> tuple[str, str]:
    """The installed source of ``module.<qualname>`` (read, not imported) and ``file:line``."""
    path = importlib.util.find_spec(module).origin
    with open(path) as f:
        text = f.read()
    node: ast.AST = ast.parse(text)
    for name in qualname:
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name
        )
    where = f"{module.replace('.', '/')}.py:{node.lineno}"
    return ast.get_source_segment(text, node), where


def _code(src: str) -> str:
    """The source without comments and blank lines, whitespace collapsed."""
    lines = (line.split("#", 1)[0] for line in src.splitlines())
    return " ".join(" ".join(lines).split())


def test_last_main_layer_tripwire_flags_come_from_dsa_layer_skips_topk():
    src, where = _source("sglang.srt.models.deepseek_v2", "DeepseekV2AttentionMLA", "__init__")
    code = _code(src)
    assert "self.skip_topk = dsa_layer_skips_topk(config, layer_id)" in code, where
    assert "self.next_skip_topk = dsa_layer_skips_topk(config, layer_id + 1)" in code, where
    # NextN: both flags True (computes only when nothing is carried)
    assert "if is_nextn: self.skip_topk = True self.next_skip_topk = True" in code, where
    src, where = _source(
        "sglang.srt.models.deepseek_common.attention_forward_methods.forward_mla",
        "DeepseekMLAForwardMixin",
        "forward_absorb_core",
    )
    # the flag only decides whether the attention hands its top-k back to the model's loop
    assert (
        "if not self.next_skip_topk: return output, None else: return output, topk_indices"
        in _code(src)
    ), where


def test_last_main_layer_tripwire_the_target_never_hands_its_topk_on():
    """The target's loop drops the last layer's top-k; only a next pipeline stage gets one."""
    src, where = _source("sglang.srt.models.deepseek_v2", "DeepseekV2Model", "forward")
    code = _code(src)
    assert "index_topk_share.update(topk_indices)" in code, where
    assert "publish(" not in code, f"{where}: the target now publishes its top-k; revisit"
    assert "spec_info" not in code, where
    assert "and self.end_layer < self.config.num_hidden_layers" in code, where
    # NextN, a separate model and forward, starts from its own MTP carry and publishes into it
    src, where = _source("sglang.srt.models.deepseek_nextn", "DeepseekModelNextN", "forward")
    code = _code(src)
    assert "index_topk_share = IndexTopKShareState.from_mtp_carry(forward_batch)" in code, where
    assert "index_topk_share.publish()" in code, where


def test_nextn_first_pass_starts_with_nothing_carried():
    """SGLang's own carry: outside an MTP iteration NextN gets no top-k, whatever spec_info holds;
    inside one it gets the previous NextN step's (or the draft-extend seed, when kept)."""
    from sglang.srt.layers.attention.index_topk_share import IndexTopKShareState

    left_over = object()  # stands for a top-k tensor; the carry never looks inside it
    batch = SimpleNamespace(
        reuse_dsa_topk_indices=False, spec_info=SimpleNamespace(dsa_topk_indices=left_over)
    )
    assert IndexTopKShareState.from_mtp_carry(batch).topk_indices is None
    with IndexTopKShareState.mtp_iteration(batch, keep_carry_seed=False) as share:
        assert share.topk_indices is None  # a fresh iteration drops what was left
    batch.spec_info.dsa_topk_indices = left_over
    with IndexTopKShareState.mtp_iteration(batch, keep_carry_seed=True) as share:
        assert share.topk_indices is left_over  # the draft-extend seed: NextN's own top-k
    assert batch.reuse_dsa_topk_indices is False and batch.spec_info.dsa_topk_indices is None
