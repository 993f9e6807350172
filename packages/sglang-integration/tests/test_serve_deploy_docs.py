"""docs/deploy.md: every cpkv-serve command resolves with sglang 0.5.23, and PD pairs agree."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import _sglang_env as env
import pytest
from sglang_cpkv.serve.cli import main

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

DOC = Path(__file__).parents[1] / "docs" / "deploy.md"
MODEL = "zai-org/GLM-5.1-FP8"


def _commands() -> dict[str, list[str]]:
    """``{"prefill node, SM100": argv, ...}`` from the doc's ```bash blocks."""
    out = {}
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S):
        title, _, body = block.partition("\n")
        argv = shlex.split(body.replace("\\\n", " "))
        if argv and argv[0] == "cpkv-serve":
            out[title.lstrip("# ").strip()] = argv[1:]
    return out


COMMANDS = _commands()


def test_doc_has_both_nodes_for_both_gpus():
    assert set(COMMANDS) == {
        "prefill node, SM100", "decode node, SM100", "prefill node, SM90", "decode node, SM90",
    }  # fmt: skip
    for argv in COMMANDS.values():
        assert argv[argv.index("--model-path") + 1] == MODEL


@pytest.fixture(scope="module")
def reports():
    """Each documented command resolved by cpkv-serve --dry-run for its GPU, as JSON."""
    out = {}
    for title, argv in COMMANDS.items():
        argv = [str(env.GLM51_DIR) if a == MODEL else a for a in argv]
        gpu = "sm100" if "SM100" in title else "sm90"
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main([*argv, "--dry-run", "--gpu", gpu, "--dry-run-format", "json"])
        assert code == 0, title
        out[title] = json.loads(buf.getvalue())
    return out


@pytest.mark.parametrize("gpu", ["SM100", "SM90"])
def test_pd_pair_shares_kv_layout_and_schedule(reports, gpu):
    p, d = reports[f"prefill node, {gpu}"], reports[f"decode node, {gpu}"]
    assert p["resolved"]["disaggregation_mode"] == "prefill"
    assert d["resolved"]["disaggregation_mode"] == "decode"
    assert p["kv_cache"] == d["kv_cache"]
    expected = {"SM100": ("raw fp8 (trtllm)", 576), "SM90": ("packed fp8 (FlashMLA)", 656)}[gpu]
    assert (p["kv_cache"]["layout"], p["kv_cache"]["bytes_per_token"]) == expected
    assert p["indexcache"]["full_layers"] == d["indexcache"]["full_layers"]
    assert p["indexcache"]["num_full"] == 21


@pytest.mark.parametrize("gpu", ["SM100", "SM90"])
def test_prefill_node_runs_cp8_and_decode_node_dp_attention(reports, gpu):
    p, d = reports[f"prefill node, {gpu}"]["resolved"], reports[f"decode node, {gpu}"]["resolved"]
    assert (p["enable_prefill_cp"], p["attn_cp_size"], p["cp_strategy"]) == (True, 8, "interleave")
    assert (d["attn_dp_size"], d["enable_prefill_cp"]) == (8, False)
    w = reports[f"prefill node, {gpu}"]["warmup"]
    assert w["dense_m_max"] == 16384 and w["m_max"] == 131072


@pytest.mark.parametrize(
    "flag",
    [
        ["--enable-nsa-prefill-context-parallel"],
        ["--nsa-prefill-backend", "flashmla_sparse"],
        ["--nsa-decode-backend", "fa3"],
        ["--nsa-prefill-cp-mode", "in-seq-split"],
    ],
)
def test_removed_nsa_flags_are_rejected_by_sglang(flag, capsys):
    from sglang.srt.server_args import prepare_server_args

    with pytest.raises(SystemExit):
        prepare_server_args(["--model-path", str(env.GLM51_DIR), *flag])
    assert f"unrecognized arguments: {' '.join(flag)}" in capsys.readouterr().err
    assert " ".join(flag) not in "".join(" ".join(a) for a in COMMANDS.values())
