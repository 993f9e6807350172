"""``cpkv-serve --dry-run``: GLM-5.1 resolved on a CPU for SM90/SM100, printed as text or JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import _sglang_env as env
import pytest
from sglang_cpkv.serve.cli import main

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

PREFILL_NODE = [
    "--chunked-prefill-size", "65536", "--enable-prefill-cp", "--attn-cp-size", "8",
    "--cp-strategy", "interleave", "--dsa-prefill-backend", "flashmla_sparse",
    "--cpkv-index-topk-freq", "4",
]  # fmt: skip


def _run(capsys, *argv):
    code = main([*env.glm51_argv(), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_sm100_cp8(capsys):
    code, out, _ = _run(capsys, *PREFILL_NODE, "--dry-run", "--gpu", "sm100")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("cpkv-serve --dry-run: GlmMoeDsaForCausalLM (78 layers) from ")
    assert "on SM100 (emulated), sglang 0.5.23" in lines[0]
    assert "  attention dsa; DSA prefill flashmla_sparse, DSA decode flashmla_kv" in lines
    assert any(
        ln.startswith("  why: decode trtllm -> flashmla_kv (you set --dsa-prefill-backend")
        for ln in lines
    )
    assert "  fp8_e4m3, page size 64, packed fp8 (FlashMLA): 656 B/token/layer" in lines
    assert any("attention cp 8 (prefill CP on, interleave)" in ln for ln in lines)
    assert any("chunked prefill 65536" in ln for ln in lines)
    full = "[0, 1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 69, 73, 77]"
    assert (
        f"  21/78 layers run the indexer (73.1% of indexer FLOPs saved): full layers {full}"
        in lines
    )
    assert "  two-batch overlap: off" in lines
    dense = lines.index(next(ln for ln in lines if ln.startswith("  GEMM_NT_F8F8BF16:")))
    assert lines[dense].startswith(
        "  GEMM_NT_F8F8BF16: 5 of 10 shapes 16384 Ms up to 16384 per shape "
        "(SGLang: 131072 up to 131072); dense: a rank runs at most 16384 rows"
    )
    assert lines[dense + 1] == (
        "    shrink: attn.fused_qkv_a_proj (N 2624, K 6144), attn.q_b_proj (N 16384, K 2048), "
        "attn.o_proj (N 6144, K 16384), indexer.wq_b (N 4096, K 2048), indexer.wk (N 128, K 6144)"
    )
    # SGLang resolves no all-to-all MoE backend here: dense MLP and shared expert split over TP 8
    assert lines[dense + 2].startswith(
        "    keep SGLang's 131072 Ms: attn.kv_b_proj (N 28672, K 512), mlp.gate_up_proj "
        "(N 3072, K 6144), mlp.down_proj (N 6144, K 1536), shared_expert.gate_up_proj "
        "(N 512, K 6144), shared_expert.down_proj (N 6144, K 256); gathered: "
    )
    assert (
        "  SGLang's list from sglang 0.5.23 update_deep_gemm_config; forwards up to 131072 "
        "tokens, a CP rank runs at most 16384 rows"
    ) in lines
    grouped = [ln for ln in lines if ln.startswith("  GROUPED_GEMM_NT_F8F8BF16_CONTIG:")]
    assert grouped and "1024 Ms up to 131072" in grouped[0] and "keeps the full grid" in grouped[0]


def test_json_report_sm90_defaults(capsys):
    code, out, _ = _run(capsys, "--dry-run", "--gpu", "sm90", "--dry-run-format", "json")
    assert code == 0
    r = json.loads(out)
    assert r["gpu"]["capability"] == [9, 0] and r["sglang"] == "0.5.23"
    res = r["resolved"]
    assert (res["kv_cache_dtype"], res["dsa_prefill_backend"], res["dsa_decode_backend"]) == (
        "bfloat16", "flashmla_sparse", "fa3",
    )  # fmt: skip
    assert r["kv_cache"] == {
        "dtype": "bfloat16",
        "page_size": 64,
        "layout": "bf16",
        "bytes_per_token": 1152,
    }
    assert r["indexcache"]["num_full"] == 78 and r["indexcache"]["saved_fraction"] == 0
    w = r["warmup"]
    assert w["inputs"]["cp_size"] == 1 and w["dense_m_max"] == 16384  # chunked 4096 -> m_max 16K
    assert set(w["kernels"]) == {
        "GEMM_NT_F8F8BF16", "GROUPED_GEMM_NT_F8F8BF16_CONTIG", "GROUPED_GEMM_NT_F8F8BF16_MASKED",
    }  # fmt: skip
    topics = {d["topic"] for d in r["decisions"]}
    assert "dsa-backends" in topics


def test_resolution_error_exit_2(capsys):
    """The plugin's refusal during SGLang's resolution is cpkv's, not SGLang's: it said "SGLang
    refused these arguments: DsaBackendError"."""
    code, out, err = _run(
        capsys, "--dsa-prefill-backend", "trtllm", "--dsa-decode-backend", "flashmla_kv",
        "--dry-run", "--gpu", "sm100",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert _refusal(err).startswith("cpkv-serve: error: --dsa-prefill-backend trtllm (raw fp8 ")
    assert "share one fp8 KV pool" in err and "Fix:" in err and "SGLang refused" not in err


def _refusal(err: str) -> str:
    """The one line a refused dry run prints after the plugin's ``cpkv[hooks]`` line."""
    lines = [ln for ln in err.splitlines() if not ln.startswith("cpkv[hooks]: ")]
    assert len(lines) == 1, err
    return lines[0]


CP8_PREFILL = [
    "--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy", "interleave",
    "--disaggregation-mode", "prefill",
]  # fmt: skip


@pytest.mark.parametrize("gpu", ["sm90", "sm100"])
def test_sglangs_check_server_args_refuses_in_the_dry_run(capsys, gpu):
    """Resolution alone accepted a chunk of 100 tokens with DSA's 64-token pages (exit 0, a
    report); SGLang's launcher then refused it in ``check_server_args()``. The dry run runs that
    check itself and says it is SGLang's."""
    code, out, err = _run(
        capsys, *CP8_PREFILL, "--chunked-prefill-size", "100", "--dry-run", "--gpu", gpu
    )
    assert code == 2 and out == ""
    assert _refusal(err) == (
        "cpkv-serve --dry-run: SGLang refused these arguments: AssertionError: "
        "chunked_prefill_size must be divisible by page_size"
    )


@pytest.mark.parametrize("size", ["-5", "0"])
def test_a_bound_of_cpkvs_planner_is_one_line(capsys, size):
    """``--chunked-prefill-size -5`` (or 0) ended in deepgemm_compat's ``InputError`` raised
    while the report was built: a 52-line traceback, exit 1."""
    code, out, err = _run(
        capsys, *CP8_PREFILL, "--chunked-prefill-size", size, "--dry-run", "--gpu", "sm90"
    )
    assert code == 2 and out == ""
    assert _refusal(err).startswith(
        f"cpkv-serve: error: chunked_prefill_size={size}: only -1 turns chunked prefill off"
    )
    assert "fix: pass -1 for off, or a chunk size >= 1" in err and "Traceback" not in err


def test_the_shared_kv_gates_refusal_is_cpkvs():
    """``--cpkv-shared-kv`` refused by the plugin's gate during SGLang's resolution read "SGLang
    refused these arguments: SharedKVError: ...". A fresh process: the shared-KV hooks, once
    applied, stay for the process."""
    script = Path(sys.executable).with_name("cpkv-serve")
    proc = subprocess.run(
        [str(script), *env.glm51_argv(), *CP8_PREFILL, "--disaggregation-transfer-backend",
         "mooncake", "--dsa-prefill-backend", "flashmla_kv", "--dsa-decode-backend",
         "flashmla_sparse", "--kv-cache-dtype", "bfloat16", "--cpkv-shared-kv", "--dry-run",
         "--gpu", "sm90"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    line = _refusal(proc.stderr)
    assert line.startswith("cpkv-serve: error: --cpkv-shared-kv cannot serve this deployment: ")
    assert "--dsa-prefill-backend flashmla_kv" in line and "SGLang refused" not in line


_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", re.M)


def test_sglang_log_lines_wait_for_log_level(capsys):
    """SGLang logged about 12 lines on stderr (page size, KV dtype, backends...) before every
    report; they now show only at the ``--log-level`` the user asks for."""
    code, out, err = _run(capsys, *CP8_PREFILL, "--dry-run", "--gpu", "sm90")
    assert code == 0 and out.startswith("cpkv-serve --dry-run: ")
    assert not _LOG_LINE.search(err), err
    code, out, err = _run(capsys, *CP8_PREFILL, "--log-level", "info", "--dry-run", "--gpu", "sm90")
    assert code == 0 and out.startswith("cpkv-serve --dry-run: ")
    logged = _LOG_LINE.findall(err)
    assert len(logged) >= 10, err
    assert "Setting page size to 64 for DeepSeek DSA." in err
    assert "cpkv[dsa-backends]: prefill=flashmla_sparse, decode=fa3" in err


def test_tbo_with_sharing_exit_2(capsys):
    code, _, err = _run(
        capsys,
        "--enable-two-batch-overlap",
        "--cpkv-index-topk-freq",
        "4",
        "--dry-run",
        "--gpu",
        "sm90",
    )
    assert code == 2 and "two-batch overlap cannot carry the indexer top-k" in err


def test_no_gpu_needs_gpu_flag(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --dry-run resolves for it")
    code, _, err = _run(capsys, "--dry-run")
    assert code == 2 and "pass --gpu sm90 or --gpu sm100" in err


def test_console_script_fresh_process(tmp_path):
    """The installed ``cpkv-serve`` script in a fresh process (its own load_plugins())."""
    script = Path(sys.executable).with_name("cpkv-serve")
    proc = subprocess.run(
        [str(script), *env.glm51_argv(), "--dry-run", "--gpu", "sm100", "--dry-run-format", "json",
         "--cpkv-index-topk-freq", "4", "--dsa-prefill-backend", "flashmla_sparse"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r["resolved"]["dsa_decode_backend"] == "flashmla_kv"
    assert r["indexcache"]["full_layers"] == [0, 1, *range(5, 78, 4)]
    decisions = {d["message"] for d in r["decisions"] if d["topic"] == "dsa-backends"}
    assert "decode trtllm -> flashmla_kv" in decisions  # said in the report, not logged
    assert proc.stderr.startswith("cpkv[hooks]: ") and proc.stderr.count("\n") == 1


def test_non_dsa_model_reports_without_dsa_sections(tmp_path, capsys):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
                "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
                "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
            }
        )
    )  # fmt: skip
    code = main(["--model-path", str(tmp_path), "--dry-run", "--gpu", "sm90"])
    out = capsys.readouterr().out
    assert code == 0
    assert "LlamaForCausalLM (2 layers)" in out and "not a DSA model" in out
    assert "IndexCache" not in out and "knows the GEMM shapes of DSA models only" in out


def test_help_sglang_asks_sglang_itself(capsys):
    """``--help-sglang``: cpkv's flags, then SGLang's own help (its parser, imported)."""
    try:  # sglang serve prints its help and returns (or exits 0, depending on the backend)
        code = main(["--help-sglang"])
    except SystemExit as exc:
        code = exc.code
    assert code in (0, None)
    ours, _, theirs = capsys.readouterr().out.partition("--- sglang serve ---")
    assert "--cpkv-index-topk-freq" in ours and "--dry-run" in ours
    assert "usage:" in theirs and "--model-path" in theirs
    assert "read from its parser" not in theirs  # SGLang's text, not the table's listing
