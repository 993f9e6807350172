"""``indexcache schedule`` on hostile input: exit 2, one line naming the input, nothing else.

Every case asserts the exit code, a one-line stderr with no traceback, empty stdout, no process
spawned, and the directory tree (hostile files included) unchanged. The resource cases also run in
a fresh interpreter and assert its peak RSS stays at a normal run's: the refusal comes before
anything of the hostile size is built (before the bound, ``--layers 100000000`` ran for over 10
minutes and reached 2.7 GB). A closed stdout ends the output quietly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_cli import run_in_process, run_into_closed_pipe, run_measured, tree
from indexcache.cli import main

LAYERS_CAP = "a schedule holds at most 4096 layers"


def _config(**fields: object) -> str:
    return json.dumps(fields)


# file name -> content under the case directory; "fifo" and "sparse" are made specially
FILES: dict[str, str | bytes] = {
    "good/config.json": _config(num_hidden_layers=12, index_topk_freq=4),
    "not_json/config.json": "{not json",
    "empty_file/config.json": "",
    "list/config.json": "[1, 2]",
    "not_utf8/config.json": b'{"num_hidden_layers": "\xff\xfe"}',
    "deep/config.json": "[" * 100_000 + "]" * 100_000,
    "huge_int/config.json": '{"num_hidden_layers": ' + "9" * 5000 + "}",
    "layers_huge/config.json": _config(num_hidden_layers=100_000_000, index_topk_freq=4),
    "layers_float/config.json": _config(num_hidden_layers=78.0),
    "layers_nan/config.json": '{"num_hidden_layers": NaN}',
    "freq_huge/config.json": _config(num_hidden_layers=78, index_topk_freq=10**23),
    "nextn_huge/config.json": _config(num_hidden_layers=78, num_nextn_predict_layers=10**9),
    "types_huge/config.json": _config(num_hidden_layers=78, indexer_types=["full"] * 5000),
    "types_dict/config.json": _config(num_hidden_layers=2, indexer_types={"full": 1}),
    "pattern_number/config.json": _config(num_hidden_layers=2, index_topk_pattern=4),
    "cli_factor/config.json": _config(num_hidden_layers=8, cli_factor=3),
    "dims_str/config.json": _config(num_hidden_layers=8, hidden_size="x"),
    "dims_huge/config.json": _config(num_hidden_layers=8, index_head_dim=2**40),
}

CASES: dict[str, tuple[list[str], str]] = {
    # flags: bounds
    "layers_huge": (
        ["--layers", "100000000", "--freq", "4"],
        f"--layers must be <= 4096 ({LAYERS_CAP}",
    ),
    "layers_100k": (["--layers", "100000"], "--layers must be <= 4096"),
    "layers_zero": (["--layers", "0"], "--layers must be >= 1"),
    "layers_negative": (["--layers", "-3"], "--layers must be >= 1"),
    "freq_huge": (
        ["--layers", "78", "--freq", "99999999999999999999999"],
        "--freq must be <= 4096",
    ),
    "freq_zero": (["--layers", "8", "--freq", "0"], "--freq must be >= 1 (1 means every layer"),
    "offset_zero": (["--layers", "8", "--freq", "4", "--offset", "0"], "offset <= 0 would make"),
    "offset_huge": (["--layers", "8", "--offset", "5000"], "--offset must be <= 4096"),
    "nextn_negative": (["--layers", "8", "--nextn", "-1"], "--nextn must be >= 0"),
    "nextn_huge": (["--layers", "8", "--nextn", "4097"], "--nextn must be <= 4096"),
    "seq_len_zero": (["--layers", "8", "--seq-len", "0"], "--seq-len must be >= 1"),
    "seq_len_huge": (
        ["--layers", "8", "--seq-len", "2147483648"],
        "--seq-len must be <= 2147483647",
    ),
    # flags: syntax (argparse, made one line)
    "layers_word": (["--layers", "four"], "argument --layers: invalid int value: 'four'"),
    "layers_float": (["--layers", "1e3"], "invalid int value: '1e3'"),
    "layers_5000_digits": (["--layers", "9" * 5000], "argument --layers: invalid int value"),
    "format_xml": (["--layers", "8", "--format", "xml"], "argument --format: invalid choice"),
    "unknown_flag": (["--layers", "8", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    # flags: combinations
    "no_source": (["--freq", "4"], "give --layers (with --freq/--offset), --pattern, or --config"),
    "pattern_and_freq": (["--pattern", "FFS", "--freq", "2"], "--pattern replaces --freq/--offset"),
    "config_and_flags": (["--config", "{d}/good", "--freq", "4"], "drop --freq"),
    # patterns
    "pattern_length": (
        ["--pattern", "FFS", "--layers", "4"],
        "has 3 entries but num_hidden_layers",
    ),
    "pattern_alphabet": (["--pattern", "FFx"], "only 'F' (full) and 'S'"),
    "pattern_layer0": (["--pattern", "SFF"], "layer 0 must be 'full'"),
    "pattern_empty": (["--pattern", ""], "index_topk_pattern is empty"),
    "pattern_huge": (["--pattern", "F" * 100_000], f"has 100000 entries; {LAYERS_CAP}"),
    # config files
    "config_missing": (["--config", "{d}/nope"], "{d}/nope does not exist"),
    "config_empty_dir": (["--config", "{d}/empty_dir"], "empty_dir/config.json does not exist"),
    "config_dev_zero": (["--config", "/dev/zero"], "/dev/zero is not a regular file"),
    "config_fifo": (["--config", "{d}/fifo"], "fifo is not a regular file"),
    "config_json_is_a_dir": (["--config", "{d}/dir_json"], "config.json is not a regular file"),
    "config_too_big": (["--config", "{d}/sparse"], "is 1,073,741,824 bytes, over the 16,777,216"),
    "config_long_name": (["--config", "a" * 5000], "File name too long"),
    "config_not_json": (["--config", "{d}/not_json"], "{d}/not_json/config.json is not valid JSON"),
    "config_empty_file": (["--config", "{d}/empty_file"], "Expecting value"),
    "config_list": (["--config", "{d}/list"], "must hold a JSON object; got list"),
    "config_not_utf8": (["--config", "{d}/not_utf8"], "is not UTF-8 text"),
    "config_deep": (["--config", "{d}/deep"], "nests arrays or objects too deeply"),
    "config_huge_int": (["--config", "{d}/huge_int"], "holds an integer of over 4300 digits"),
    "config_layers_huge": (["--config", "{d}/layers_huge"], "num_hidden_layers must be <= 4096"),
    "config_layers_float": (["--config", "{d}/layers_float"], "got float 78.0"),
    "config_layers_nan": (["--config", "{d}/layers_nan"], "got float nan"),
    "config_freq_huge": (["--config", "{d}/freq_huge"], "index_topk_freq must be <= 4096"),
    "config_nextn_huge": (["--config", "{d}/nextn_huge"], "num_nextn_predict_layers must be <="),
    "config_types_huge": (["--config", "{d}/types_huge"], f"has 5000 entries; {LAYERS_CAP}"),
    "config_types_dict": (["--config", "{d}/types_dict"], "indexer_types must be a list"),
    "config_pattern_number": (["--config", "{d}/pattern_number"], "must be a string of 'F'/'S'"),
    "config_cli_factor": (["--config", "{d}/cli_factor"], "cli_factor=3 is not supported"),
    "config_dims_str": (["--config", "{d}/dims_str"], "hidden_size must be an integer >= 1"),
    "config_dims_huge": (["--config", "{d}/dims_huge"], "index_head_dim must be <= 2147483647"),
}


@pytest.fixture
def hostile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding every hostile file; also the working directory."""
    for name, content in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "dir_json" / "config.json").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo")
    with (tmp_path / "sparse").open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB that takes no disk
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(argv: list[str], d: Path) -> list[str]:
    return ["schedule", *(a.replace("{d}", str(d)) for a in argv)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_input(hostile_dir, case):
    argv, message = CASES[case]
    before = tree(hostile_dir)
    run = run_in_process(main, _argv(argv, hostile_dir))
    assert run.code == 2 and run.out == ""
    assert run.err.count("\n") == 1 and run.err.endswith("\n"), "one line"
    assert run.err.startswith("indexcache") and "error: " in run.err
    assert message.replace("{d}", str(hostile_dir)) in run.err
    assert "Traceback" not in run.err
    assert run.spawns == [] and run.children_after == 0
    assert tree(hostile_dir) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "the following arguments are required: command"), (["frobnicate"], "invalid choice")],
)
def test_hostile_top_level(hostile_dir, argv, message):
    run = run_in_process(main, argv)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert run.err.startswith("indexcache: error: ") and message in run.err
    assert "see 'indexcache --help'" in run.err


def test_bounds_in_the_library_come_before_allocation():
    """The library refuses oversized schedules with almost no Python memory allocated."""
    import tracemalloc

    from indexcache import IndexerSchedule, ScheduleError, schedule_from_config

    hostile = [
        lambda: schedule_from_config({"num_hidden_layers": 100_000_000, "index_topk_freq": 4}),
        lambda: IndexerSchedule.from_freq(100_000_000, 4),
        lambda: IndexerSchedule.from_freq(78, 10**23),
        lambda: IndexerSchedule.from_freq(78, 4, num_nextn_layers=10**9),
    ]
    for call in hostile:
        tracemalloc.start()
        try:
            with pytest.raises(ScheduleError, match="must be <="):
                call()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 64 * 1024, f"{peak} bytes traced before the refusal"


RESOURCE_CASES = ["layers_huge", "pattern_huge", "config_too_big", "config_layers_huge"]


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS (KiB) of an ordinary run: a fresh interpreter printing GLM-5's schedule."""
    tmp = tmp_path_factory.mktemp("baseline")
    run = run_measured("indexcache.cli", ["schedule", "--layers", "78", "--freq", "4"], tmp)
    assert run.code == 0 and "full layers: 21 of 78" in run.out
    return run.maxrss_kib


@pytest.mark.parametrize("case", RESOURCE_CASES)
def test_hostile_sizes_stay_small(hostile_dir, tmp_path_factory, baseline_rss, case):
    argv, message = CASES[case]
    before = tree(hostile_dir)
    tmp = tmp_path_factory.mktemp("measured")
    run = run_measured("indexcache.cli", _argv(argv, hostile_dir), tmp, cwd=hostile_dir)
    assert run.code == 2 and message.replace("{d}", str(hostile_dir)) in run.err
    assert run.spawns == [] and tree(hostile_dir) == before
    # a 100M-layer schedule is GBs; the refused run is an ordinary one (8 MiB of slack)
    assert run.maxrss_kib <= baseline_rss + 8 * 1024


def test_the_largest_allowed_schedule_runs():
    run = run_in_process(main, ["schedule", "--layers", "4096", "--freq", "4", "--nextn", "4096"])
    assert run.code == 0 and "full layers: 1025 of 4096" in run.out


# Pipes -------------------------------------------------------------------------------------------
def _closed_stdout_run(*argv: str) -> subprocess.CompletedProcess:
    return run_into_closed_pipe("indexcache", *argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "--layers", "78", "--freq", "4"],
        ["schedule", "--layers", "4096", "--format", "json"],
        ["--help"],
        ["schedule", "--help"],
    ],
)
def test_closed_stdout_is_quiet(argv):
    proc = _closed_stdout_run(*argv)
    assert proc.stderr == "" and proc.returncode == 0


def test_head_dash_1_is_quiet():
    """``indexcache schedule ... | head -1`` prints one line and no BrokenPipeError."""
    # ~100 KB of JSON: more than a pipe holds, so the writer is still writing when head exits
    cmd = f"{sys.executable} -m indexcache schedule --layers 4096 --nextn 4096 --format json"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{cmd} | head -1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.stdout == "{\n" and proc.stderr == "" and proc.returncode == 0


def test_closed_stdout_keeps_the_exit_code_of_an_error():
    proc = _closed_stdout_run("schedule", "--layers", "0")
    assert proc.returncode == 2 and proc.stderr.startswith("indexcache: error: --layers")
