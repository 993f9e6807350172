"""cpkv-serve's own flags: split from SGLang's, validated, merged into the model overrides."""

from __future__ import annotations

import json

import pytest
from sglang_cpkv.serve._flags import OVERRIDE_FLAG, merge_model_overrides, parse_cpkv_args


def test_split_keeps_sglang_args_in_order():
    argv = [
        "/models/glm", "--tp", "8", "--dry-run", "--gpu", "sm100", "--cpkv-index-topk-freq", "4",
        "--enable-two-batch-overlap", "--cpkv-index-skip-topk-offset=3",
        "--kv-cache-dtype", "fp8_e4m3",
    ]  # fmt: skip
    a = parse_cpkv_args(argv)
    assert a.dry_run and a.gpu == "sm100" and a.dry_run_format == "text"
    assert a.index_overrides == {"index_topk_freq": 4, "index_skip_topk_offset": 3}
    assert a.sglang_argv == (
        "/models/glm", "--tp", "8", "--enable-two-batch-overlap", "--kv-cache-dtype", "fp8_e4m3",
    )  # fmt: skip


def test_no_abbreviation_steals_sglang_flags():
    # allow_abbrev=False: a prefix of one of our flags is SGLang's business, not ours.
    a = parse_cpkv_args(["--gp", "x", "--dry", "1"])
    assert a.sglang_argv == ("--gp", "x", "--dry", "1") and not a.dry_run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "sm90"], "--gpu only applies to --dry-run"),
        (["--dry-run", "--gpu", "sm80"], "invalid choice"),
        (["--cpkv-index-topk-freq", "0"], "index_topk_freq must be an integer >= 1"),
        (["--cpkv-index-skip-topk-offset", "0"], "index_skip_topk_offset must be an integer >= 1"),
        (["--cpkv-index-topk-pattern", "SFF"], "layer 0 must be 'full'"),
        (["--cpkv-index-topk-pattern", "FXS"], "may hold only 'F' (full) and 'S' (shared)"),
        (["--cpkv-index-topk-freq", "four"], "invalid int value"),
    ],
)
def test_bad_cpkv_flags_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        parse_cpkv_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_merge_appends_override():
    out = merge_model_overrides(["--tp", "8"], {"index_topk_freq": 4})
    assert out[:2] == ["--tp", "8"] and out[2] == OVERRIDE_FLAG
    assert json.loads(out[3]) == {"index_topk_freq": 4}


@pytest.mark.parametrize("form", ["space", "equals"])
def test_merge_into_existing_override(form):
    existing = '{"rope_scaling": null, "index_topk_freq": 4}'
    argv = [OVERRIDE_FLAG, existing] if form == "space" else [f"{OVERRIDE_FLAG}={existing}"]
    out = merge_model_overrides(argv, {"index_topk_freq": 4, "index_skip_topk_offset": 3})
    text = out[1] if form == "space" else out[0].split("=", 1)[1]
    assert json.loads(text) == {
        "rope_scaling": None,
        "index_topk_freq": 4,
        "index_skip_topk_offset": 3,
    }
    assert len(out) == len(argv)


def test_merge_unchanged_without_flags():
    assert merge_model_overrides(["--tp", "8"], {}) == ["--tp", "8"]


@pytest.mark.parametrize(
    ("existing", "message"),
    [
        ('{"index_topk_freq": 2}', "disagree on index_topk_freq (2 vs 4)"),
        ('{"indexer_types": ["full"]}', "sets indexer_types"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_merge_conflicts(existing, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        merge_model_overrides([OVERRIDE_FLAG, existing], {"index_topk_freq": 4})
