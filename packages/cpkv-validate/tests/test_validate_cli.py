"""``cpkv-validate`` end to end (in-process ``main``): exit codes, table, JSON, bad arguments."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch
from cpkv_validate import main, scenario_names
from cpkv_validate.cli import _plan, build_parser


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
    (["--allocator", "buddy"], "invalid choice: 'buddy'"),
    (["--url", "http://127.0.0.1:1", "--allocator", "sglang"], "apply to the reference engine"),
    (["--url", "http://127.0.0.1:1", "--cp", "2"], "apply to the reference engine"),
    (["--url", "http://x:1", "--compare-tokens", "40"], "--compare-tokens must be in 1..--max"),
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
    for name in scenario_names():
        assert name in out
    assert "[cp 4]" in out  # fresh_prompts_cp4 says where the default run puts it


def test_default_plan_runs_each_scenario_at_its_own_cp():
    args = build_parser().parse_args([])
    plan = _plan(args)
    assert plan[4] == ["fresh_prompts_cp4"]
    assert set(plan[2]) == set(scenario_names()) - {"fresh_prompts_cp4"}
    args = build_parser().parse_args(["--cp", "3"])
    assert _plan(args) == {3: scenario_names()}


def test_pass_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = ["--cp", "1", "--scenario", "tiny_extends", "--scenario", "odd_extends"]
    assert main([*argv, "--json", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tiny_extends" in out and "odd_extends" in out and "PASS" in out and "FAIL" not in out
    report = json.loads(path.read_text())
    assert report["ok"] is True
    assert report["config"]["cp"] == 1 and report["config"]["inverse"] == "per-request"
    assert report["config"]["splits"] == ["zigzag", "interleave"]
    assert report["config"]["allocators"] == ["free", "sglang"]
    runs = [(s["name"], s["split"], s["allocator"]) for s in report["scenarios"]]
    assert runs == [
        (name, split, alloc)
        for name in ("odd_extends", "tiny_extends")  # registry order, not argv order
        for split in ("zigzag", "interleave")
        for alloc in ("free", "sglang")
    ]
    for mode in ("free", "sglang"):  # every row of the table names its allocator
        assert sum(f" {mode} " in line for line in out.splitlines()) == 4


def test_legacy_inverse_exits_1_and_names_the_source(tmp_path, capsys):
    path = tmp_path / "r.json"
    argv = ["--cp", "1", "--inverse", "legacy", "--scenario", "cache_miss_mixed"]
    argv += ["--split", "zigzag"]
    assert main([*argv, "--json", str(path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "CONTAMINATION" in out and "a ← b" in out
    free, sglang = json.loads(path.read_text())["scenarios"]
    assert (free["allocator"], sglang["allocator"]) == ("free", "sglang")
    failed = {r["request"]: r["leak_sources"] for r in free["requests"] if r["verdict"] == "FAIL"}
    assert failed == {"a": ["b"]}  # a and b write one prefix page; b scans last
    assert sglang["ok"] is True  # page-aligned hits: nothing shared is written


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
        "--allocator",
        "sglang",
        "--scenario",
        "same_step_alloc",
        "--no-progress",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "same_step_alloc" in proc.stdout and "interleave" in proc.stdout
    assert "sglang" in proc.stdout and "free" not in proc.stdout
