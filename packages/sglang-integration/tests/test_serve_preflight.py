"""The pre-SGLang checks of cpkv-serve as functions: a fixed table beside random input.

Random input (hypothesis) may only ever produce a :class:`BadInput` of one line or pass; nothing
else escapes. The command-line table is ``test_serve_hostile.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cpkv_cli import InputError as BadInput
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.serve._machine import DRY_RUN_GPUS_PER_NODE, check_machine
from sglang_cpkv.serve._model_check import (
    MAX_LAYERS,
    config_problems,
    int_problem,
    locate_model,
    read_config,
)
from sglang_cpkv.serve._preflight import check_parallel, preflight
from sglang_cpkv.serve._sglang_argv import SGLangArgs, read_sglang_args

GLM51 = Path(__file__).parent / "fixtures" / "glm51_fp8"
GLM = json.loads((GLM51 / "config.json").read_text())
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_INTS = st.one_of(st.integers(-5, 20), st.integers(-(10**30), 10**30))
_JSONISH = st.one_of(
    st.none(), st.booleans(), _INTS, st.floats(allow_nan=False), _TEXT,
    st.lists(_TEXT, max_size=3), st.dictionaries(_TEXT, st.integers(), max_size=2),
)  # fmt: skip
_FIELDS = [
    "architectures", "model_type", "num_hidden_layers", "index_topk", "index_n_heads",
    "index_head_dim", "kv_lora_rank", "qk_rope_head_dim", "index_topk_freq",
    "index_skip_topk_offset", "index_topk_pattern", "indexer_types", "num_nextn_predict_layers",
    "max_position_embeddings",
]  # fmt: skip


def _one_line(err: BadInput) -> None:
    assert str(err) and "\n" not in str(err)


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(st.one_of(_TEXT, st.sampled_from(["--tp", "--attn-cp-size"])), max_size=6))
def test_random_argv_reads_or_is_one_line(argv):
    try:
        read_sglang_args(argv)
    except BadInput as err:
        _one_line(err)


@settings(max_examples=300, deadline=None)
@given(path=_TEXT)
def test_random_model_path_locates_or_is_one_line(path):
    try:
        locate_model(path, "--model-path")
    except BadInput as err:
        _one_line(err)


@settings(max_examples=500, deadline=None)
@given(
    base=st.sampled_from([GLM, {}]),
    changes=st.dictionaries(st.sampled_from(_FIELDS), _JSONISH, max_size=4),
)
def test_random_config_gives_one_line_problems(base, changes):
    for problem in config_problems({**base, **changes}):
        assert problem and "\n" not in problem


@settings(max_examples=300, deadline=None)
@given(sizes=st.fixed_dictionaries({k: _INTS for k in ("tp_size", "attn_cp_size", "nnodes")}))
def test_random_parallel_sizes_pass_or_are_one_line(sizes):
    try:
        check_parallel(SGLangArgs(**sizes))
    except BadInput as err:
        _one_line(err)


def test_the_fixture_passes():
    checked = preflight({"index_topk_freq": 4}, ["--model-path", str(GLM51), "--tp", "8"], [])
    assert checked.config is not None and checked.config["num_hidden_layers"] == 78
    assert checked.model.kind == "directory"
    assert "indexcache-overrides" in checked.hooks


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["--tp", "8"], None),
        (["--tp", "16", "--nnodes", "2"], None),
        (["--tp", "8", "--pp-size", "2", "--nnodes", "2"], None),
        (["--tp", "16"], "puts 16 ranks on this node"),
        (["--tp", "8", "--pp-size", "2"], "--tp 8 x --pp-size 2 puts 16 ranks"),
        (["--tp", "4", "--base-gpu-id", "4"], None),
        (["--tp", "4", "--base-gpu-id", "5"], "puts rank 3 on GPU 8"),
        (["--tp", "4", "--gpu-id-step", "2"], None),
        (["--tp", "4", "--gpu-id-step", "3"], "puts rank 3 on GPU 9"),
        (["--tp", "1", "--dp-size", "9"], "--dp-size 9 needs a GPU per replica"),
        (["--tp", "1", "--dp-size", "16", "--nnodes", "2"], None),
    ],
)
def test_dry_run_node_bound(argv, refused):
    """A dry run for --gpu describes a node of DRY_RUN_GPUS_PER_NODE GPUs, whatever runs it."""
    assert DRY_RUN_GPUS_PER_NODE == 8
    args = read_sglang_args(argv)
    check_parallel(args)
    if refused is None:
        check_machine(args, dry_run=True, gpu="sm90")
        return
    with pytest.raises(BadInput, match=refused.replace("(", r"\(")):
        check_machine(args, dry_run=True, gpu="sm90")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), (MAX_LAYERS, True), (0, False), (MAX_LAYERS + 1, False), (True, False),
     (2.0, False), ("2", False), (None, False), (10**5000, False)],
    ids=["1", "max", "0", "max+1", "True", "2.0", "'2'", "None", "10**5000"],
)  # fmt: skip
def test_int_problem(value, ok):
    assert (int_problem(value, "num_hidden_layers", MAX_LAYERS) is None) == ok


def test_read_config_refuses_a_directory_named_config_json(tmp_path):
    (tmp_path / "config.json").mkdir()
    with pytest.raises(BadInput, match="is not a regular file"):
        read_config(tmp_path / "config.json")


def test_read_config_refuses_an_int_of_5000_digits(tmp_path):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": ' + "9" * 5000 + "}")
    with pytest.raises(BadInput, match="holds an integer of over 4300 digits"):
        read_config(tmp_path / "config.json")
