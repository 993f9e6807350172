"""What ``cpkv-serve --dry-run`` prints describes what will run: hooks, sizes, warmup, warnings.

The fresh-process test runs ``sglang_cpkv.serve.cli.main`` (the console script's function) in a new
interpreter, so the plugin registers with ``CPKV_DISABLE_HOOKS`` set, SGLang parses the config
anew (it parses it twice: the decision log must still say it once), and SGLang's import-time
warnings have their one chance to appear.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import _sglang_env as env
import pytest
from sglang_cpkv.serve._report_plugin import warmup_as_sglang_runs_it
from sglang_cpkv.serve.cli import main

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]
CP8 = ["--enable-prefill-cp", "--cp-strategy", "interleave", "--chunked-prefill-size", "65536"]
MARK = "--- main returned ---"
_FRESH = f"""
import importlib, sys
from sglang_cpkv.serve.cli import main
code = main(sys.argv[1:])
print({MARK!r}, file=sys.stderr, flush=True)
# SGLang's own module, run again now that main has returned: its warning must show
importlib.reload(sys.modules["sglang.srt.layers.quantization.awq.awq"])
sys.exit(code)
"""


@pytest.fixture(scope="module")
def fresh_run() -> subprocess.CompletedProcess:
    """A dry run in a new interpreter with the warmup hook off (no warning filters passed)."""
    argv = env.glm51_argv(
        *CP8, "--cpkv-index-topk-freq", "4", "--dry-run", "--gpu", "sm100", "--log-level", "info"
    )  # the decision log is INFO
    child_env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**child_env, "CPKV_DISABLE_HOOKS": "deepgemm-warmup"},
    )
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 0
    return proc


def test_hooks_line_names_what_is_off(fresh_run):
    assert fresh_run.stdout.splitlines()[1] == (
        "  cpkv hooks: config-repair, indexcache-overrides, tbo-index-sharing, dsa-backends, "
        "ragged-offsets; "
        "off: deepgemm-warmup (CPKV_DISABLE_HOOKS)"
    )


def test_warmup_with_its_hook_off_is_sglangs_list(fresh_run):
    lines = fresh_run.stdout.splitlines()
    assert "  cpkv's deepgemm-warmup hook is off: SGLang warms its own list" in lines
    (dense,) = [ln for ln in lines if ln.startswith("  GEMM_NT_F8F8BF16:")]
    # SGLang 0.5.23 warms 1..2 * chunked Ms (131,072 at chunked 65,536) for every shape
    assert dense.startswith("  GEMM_NT_F8F8BF16: 10 shapes 131072 Ms up to 131072 per shape")
    assert not any(ln.startswith("    shrink: ") for ln in lines)
    assert "hook is off (CPKV_DISABLE_HOOKS)" in dense
    (total,) = [ln for ln in lines if "kernel Ms in all" in ln]
    ours, theirs = total.split(" kernel Ms in all (SGLang: ")
    assert ours.strip() == theirs.split(")")[0]


def test_each_decision_once(fresh_run):
    whys = [ln for ln in fresh_run.stdout.splitlines() if ln.startswith("  why: ")]
    assert len(whys) == len(set(whys)), whys
    config = (
        "  why: DSA config already matches config.json (transformers 5.19.0 loaded every DSA field)"
    )
    assert whys.count(config) == 1
    logged = [ln for ln in fresh_run.stderr.splitlines() if "cpkv[config]" in ln]
    assert len(logged) == 1, logged


def test_parallel_line_says_off_not_null(fresh_run):
    lines = fresh_run.stdout.splitlines()
    assert (
        "  tp 8, attention dp 1, attention cp 8 (prefill CP on, interleave), ep 1, PD off, "
        "chunked prefill 65536, speculative off"
    ) in lines
    assert (
        "  note: the default --attn-cp-size 1 resolved to 8: under DSA prefill CP SGLang reads 1 "
        "(its default) as the whole attention TP group, tp / attention dp"
    ) in lines


def test_sglang_no_cuda_warnings_filtered_in_our_entry_point_only(fresh_run):
    ours, _, after = fresh_run.stderr.partition(MARK)
    assert after, "the child did not get past main()"
    assert "Only CUDA" not in ours and "UserWarning" not in ours
    assert "Only CUDA, HIP and XPU support AWQ currently." in after


def test_main_restores_warning_filters(capsys):
    before = list(warnings.filters)
    assert main([*env.glm51_argv(), "--dry-run", "--gpu", "sm90"]) == 0
    capsys.readouterr()
    assert warnings.filters == before


def test_given_attn_cp_size_kept_has_no_note(capsys):
    code = main(env.glm51_argv(*CP8, "--attn-cp-size", "8", "--dry-run", "--gpu", "sm90"))
    out = capsys.readouterr().out
    assert code == 0 and "  note:" not in out


def test_warmup_section_as_sglang_runs_it(capsys):
    """The hook-off rewrite of a real report: each cpkv number becomes SGLang's, with why."""
    code = main(env.glm51_argv(*CP8, "--dry-run", "--gpu", "sm100", "--dry-run-format", "json"))
    section = json.loads(capsys.readouterr().out)["warmup"]
    assert code == 0 and section["total_ms"] < section["sglang_total_ms"]  # the hook shrinks
    assert warmup_as_sglang_runs_it(section, ["deepgemm-warmup"]) is section
    off = warmup_as_sglang_runs_it(section, [])
    assert off["total_ms"] == section["sglang_total_ms"] and off["hook"] == "off"
    for name, row in off["kernels"].items():
        theirs = section["kernels"][name]
        assert (row["ms"], row["m_max"]) == (theirs["sglang_ms"], theirs["sglang_m_max"])
        assert "hook is off" in row["reason"]
