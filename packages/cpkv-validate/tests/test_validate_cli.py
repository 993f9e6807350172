"""``cpkv-validate`` end to end (in-process ``main``): exit codes, table, JSON.

Bad arguments are in ``test_validate_hostile.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from cpkv_validate import main, scenario_names
from cpkv_validate._cli_checks import plan as run_plan
from cpkv_validate.cli import build_parser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_exits_2(capsys):
    code = main(["--url", f"http://127.0.0.1:{_free_port()}", "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("cpkv-validate: error: cannot reach") and err.count("\n") == 1


def test_list_scenarios(capsys):
    assert main(["--list-scenarios"]) == 0
    out = capsys.readouterr().out
    for name in scenario_names():
        assert name in out
    assert "[cp 4]" in out  # fresh_prompts_cp4 says where the default run puts it


def test_default_plan_runs_each_scenario_at_its_own_cp():
    args = build_parser().parse_args([])
    plan = run_plan(args)
    assert plan[4] == ["fresh_prompts_cp4"]
    assert set(plan[2]) == set(scenario_names()) - {"fresh_prompts_cp4"}
    args = build_parser().parse_args(["--cp", "3"])
    assert run_plan(args) == {3: scenario_names()}


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
