"""``cpkv-validate`` end to end (in-process ``main``): exit codes, table, JSON, bad arguments."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch
from cpkv_validate import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD = [
    (["--cp", "0"], "--cp must be >= 1"),
    (["--scenario", "nope"], "unknown scenario(s) nope; choose from shared_prefix_pages"),
    (["--split", "diagonal"], "invalid choice: 'diagonal'"),
    (["--inverse", "value"], "invalid choice: 'value'"),
    (["--engine", "http"], "--engine http needs --url URL"),
    (["--url", "ftp://host"], "--url must start with http:// or https://"),
    (["--url", "http://127.0.0.1:1", "--inverse", "legacy"], "--inverse applies to the reference"),
    (["--engine", "reference", "--url", "http://127.0.0.1:1"], "--url is for --engine http"),
    (["--url", "http://127.0.0.1:1", "--concurrency", "0"], "--concurrency must be >= 1"),
    (["--url", "http://127.0.0.1:1", "--requests", "1"], "--requests must be >= 2"),
    (["--json", "/nonexistent-dir/x/report.json"], "does not exist"),
    (["--cp", "two"], "invalid int value: 'two'"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_exit_2_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--device", "cuda"])
    assert exc.value.code == 2
    assert "no CUDA device is visible" in capsys.readouterr().err


def test_unreachable_server_exits_2(capsys):
    code = main(["--url", f"http://127.0.0.1:{_free_port()}", "--no-progress"])
    assert code == 2
    assert "cannot reach" in capsys.readouterr().err


def test_list_scenarios(capsys):
    assert main(["--list-scenarios"]) == 0
    out = capsys.readouterr().out
    for name in (
        "shared_prefix_pages",
        "cache_miss_mixed",
        "unaligned_prefix",
        "odd_extends",
        "tiny_extends",
        "same_step_alloc",
        "eviction_churn",
    ):
        assert name in out


def test_pass_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = ["--cp", "1", "--scenario", "tiny_extends", "--scenario", "odd_extends"]
    assert main([*argv, "--json", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tiny_extends" in out and "odd_extends" in out and "PASS" in out and "FAIL" not in out
    report = json.loads(path.read_text())
    assert report["ok"] is True
    assert report["config"]["cp"] == 1 and report["config"]["inverse"] == "per-request"
    assert [s["name"] for s in report["scenarios"]] == ["tiny_extends", "odd_extends"]


def test_legacy_inverse_exits_1_and_names_the_source(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = ["--cp", "1", "--inverse", "legacy", "--scenario", "cache_miss_mixed"]
    assert main([*argv, "--json", str(path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "CONTAMINATION" in out
    (sc,) = json.loads(path.read_text())["scenarios"]
    failed = {r["request"]: r["leak_sources"] for r in sc["requests"] if r["verdict"] == "FAIL"}
    assert failed == {"a": ["b"]}  # a and b write one prefix page; b scans last


def test_module_entry_point_runs_cp2_in_a_fresh_interpreter():
    """``python -m cpkv_validate.cli`` (the GPU box has no console script): gloo, 2 ranks."""
    cmd = [
        sys.executable,
        "-m",
        "cpkv_validate.cli",
        "--cp",
        "2",
        "--split",
        "interleave",
        "--scenario",
        "same_step_alloc",
        "--no-progress",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "same_step_alloc" in proc.stdout and "cp=2 split=interleave" in proc.stdout
