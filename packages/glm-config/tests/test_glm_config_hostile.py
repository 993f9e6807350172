"""``glm-config show`` and ``set`` on hostile input: exit 2, one line naming the input, no more.

Every case asserts the exit code, a one-line stderr with no traceback, empty stdout, no process
spawned, and the whole directory tree (every hostile file included) unchanged: no backup, no temp
file, no edit. The size cases also run in a fresh interpreter and assert its peak RSS stays at a
normal run's (the refusal comes before anything of the hostile size is built, and before
transformers is imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _glmcfg_fixtures import raw
from glm_config.cli import main
from hostile_cli import (
    run_in_process,
    run_interrupted_at_import,
    run_into_closed_pipe,
    run_measured,
    tree,
)


def _glm(**changes: object) -> str:
    return json.dumps(raw("glm5_plain") | changes, indent=2) + "\n"


MODELS: dict[str, str | bytes] = {
    "good": _glm(),
    "pattern": _glm(index_topk_pattern="FF" + "S" * 76),
    "llama": json.dumps({"model_type": "llama", "num_hidden_layers": 2}),
    "not_json": "{oops",
    "empty_file": "",
    "list": "[1]",
    "not_utf8": b'{"model_type": "\xff"}',
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge_int": '{"index_topk": ' + "9" * 5000 + "}",
    # already invalid: set refuses to edit them without --force, show refuses to show them
    "bad_topk": _glm(index_topk=999_999_999_999),
    "bad_freq": _glm(index_topk_freq=99999999999999999999999),
    "bad_layers": _glm(num_hidden_layers=100_000_000),
    "bad_layers_float": _glm(num_hidden_layers=78.0),
    "bad_types": _glm(index_topk_freq=4, indexer_types=["shared"] + ["full"] * 77),
    "bad_qk": _glm(qk_rope_head_dim="64"),
    "two_errors": _glm(index_topk=0, index_head_dim=-1),
    "duplicate_key": _glm().replace('"index_topk": 2048', '"index_topk": 1024, "index_topk": 2048'),
}

SET_CASES: dict[str, tuple[list[str], str]] = {
    # assignments
    "no_assignments": (["{d}/good"], "nothing to set; give KEY=VALUE pairs"),
    "unknown_key": (["{d}/good", "index_topk_frq=4"], 'unknown key "index_topk_frq"; settable'),
    "derived_key": (["{d}/good", "indexer_types=[]"], "indexer_types cannot be set: it is derived"),
    "no_equals": (["{d}/good", "index_topk_freq"], '"index_topk_freq" is not KEY=VALUE'),
    "empty_key": (["{d}/good", "=4"], "is not KEY=VALUE"),
    "duplicate": (["{d}/good", "index_topk_freq=4", "index_topk_freq=2"], "given twice"),
    "freq_zero": (
        ["{d}/good", "index_topk_freq=0"],
        'index_topk_freq="0" is refused: index_topk_freq must be an integer >= 1 (1 = every',
    ),
    "freq_negative": (["{d}/good", "index_topk_freq=-4"], "must be an integer >= 1"),
    "freq_word": (["{d}/good", "index_topk_freq=four"], 'index_topk_freq="four" is refused'),
    "freq_float": (["{d}/good", "index_topk_freq=1.5"], 'index_topk_freq="1.5" is refused'),
    "freq_bool": (["{d}/good", "index_topk_freq=true"], 'index_topk_freq="true" is refused'),
    "freq_null": (["{d}/good", "index_topk_freq=null"], 'index_topk_freq="null" is refused'),
    "freq_empty": (["{d}/good", "index_topk_freq="], 'index_topk_freq="" is refused'),
    "freq_huge": (
        ["{d}/good", "index_topk_freq=99999999999999999999999"],
        "index_topk_freq must be <= 4096 (a freq at or above the layer count changes nothing",
    ),
    "freq_5000_digits": (
        ["{d}/good", "index_topk_freq=" + "9" * 5000],
        'index_topk_freq="99999999999999999999999999999...9999" (5002 characters) is refused: '
        "index_topk_freq must be <= 4096",
    ),
    "freq_deep_json": (["{d}/good", "index_topk_freq=" + "[" * 100_000], "must be an integer"),
    "offset_zero": (["{d}/good", "index_skip_topk_offset=0"], "an offset <= 0 would make layer"),
    "offset_huge": (["{d}/good", "index_skip_topk_offset=4097"], "must be <= 4096"),
    "topk_zero": (["{d}/good", "index_topk=0"], "index_topk must be an integer >= 1"),
    "topk_huge": (["{d}/good", "index_topk=999999999999"], "index_topk must be <= 2147483647"),
    "topk_past_positions": (
        ["{d}/good", "index_topk=300000"],
        "refused: index_topk must be <= 202752 (max_position_embeddings is 202752, and the "
        "indexer keeps at most one entry per key); got 300000",
    ),
    "pattern_length": (["{d}/good", "index_topk_pattern=FFS"], "has 3 entries but num_hidden"),
    "pattern_alphabet": (["{d}/good", "index_topk_pattern=" + "FX" * 39], "only 'F' (full)"),
    "pattern_layer0": (["{d}/good", "index_topk_pattern=" + "S" * 78], "layer 0 must be 'full'"),
    "pattern_number": (["{d}/good", "index_topk_pattern=4"], "must be a string of F/S"),
    "pattern_empty": (["{d}/good", "index_topk_pattern="], 'index_topk_pattern="" is refused'),
    "pattern_huge": (["{d}/good", "index_topk_pattern=" + "F" * 5000], "at most 4096 letters"),
    "freq_under_pattern": (["{d}/pattern", "index_topk_freq=2"], "takes priority over"),
    # files
    "missing": (["{d}/nope", "index_topk_freq=4"], "nope does not exist"),
    "empty_dir": (["{d}/empty_dir", "index_topk_freq=4"], "empty_dir/config.json does not exist"),
    "dev_zero": (["/dev/zero", "index_topk_freq=4"], "/dev/zero is not a regular file"),
    "fifo": (["{d}/fifo", "index_topk_freq=4"], "fifo is not a regular file"),
    "json_is_a_dir": (["{d}/dir_json", "index_topk_freq=4"], "config.json is not a regular file"),
    "too_big": (["{d}/sparse", "index_topk_freq=4"], "is 1,073,741,824 bytes, over the 16,777,216"),
    "long_name": (["a" * 5000, "index_topk_freq=4"], "File name too long"),
    "not_json": (["{d}/not_json", "index_topk_freq=4"], "is not valid JSON (Expecting"),
    "empty_file": (["{d}/empty_file", "index_topk_freq=4"], "is not valid JSON"),
    "list": (["{d}/list", "index_topk_freq=4"], "must hold a JSON object; got list"),
    "not_utf8": (["{d}/not_utf8", "index_topk_freq=4"], "is not UTF-8"),
    "deep": (["{d}/deep", "index_topk_freq=4"], "nests arrays or objects too deeply"),
    "huge_int": (["{d}/huge_int", "index_topk_freq=4"], "holds an integer of over 4300 digits"),
    "not_dsa": (["{d}/llama", "index_topk_freq=4"], "model_type 'llama' has no DSA indexer"),
    # already invalid files, each error named once
    "bad_topk": (
        ["{d}/bad_topk", "index_topk_freq=4"],
        "already has 1 error: index_topk must be <= 202752",
    ),
    "bad_freq": (["{d}/bad_freq", "index_topk_freq=4"], "index_topk_freq must be <= 4096"),
    "bad_layers": (["{d}/bad_layers", "index_topk_freq=4"], "num_hidden_layers must be <= 4096"),
    "bad_layers_float": (["{d}/bad_layers_float", "index_topk=8"], "got float 78.0"),
    "bad_types": (["{d}/bad_types", "index_topk_freq=1"], "indexer_types[0] is 'shared'"),
    "bad_qk": (
        ["{d}/bad_qk", "index_topk=8"],
        'qk_rope_head_dim must be an integer >= 1; got "64"',
    ),
    "two_errors": (
        ["{d}/two_errors", "index_topk_freq=4"],
        "already has 2 errors: (1) index_head_dim must be an integer >= 1; got -1. Fix: set "
        "index_head_dim to an integer in [1, 2147483647]. (2) index_topk must be an integer",
    ),
    "duplicate_key": (["{d}/duplicate_key", "index_topk=8"], "index_topk is written 2 times"),
    # read-only (root writes anything, so the mode bits decide)
    "read_only": (["{d}/read_only", "index_topk_freq=4"], "is read-only (mode 0444); refusing"),
}

SHOW_CASES: dict[str, tuple[list[str], str]] = {
    name: ([argv[0]], message)
    for name, (argv, message) in SET_CASES.items()
    if name
    in {
        "missing",
        "empty_dir",
        "dev_zero",
        "fifo",
        "json_is_a_dir",
        "too_big",
        "long_name",
        "not_json",
        "empty_file",
        "list",
        "not_utf8",
        "deep",
        "huge_int",
        "bad_freq",
        "bad_layers",
        "bad_layers_float",
        "bad_types",
        "bad_qk",
        "duplicate_key",
    }
}
SHOW_CASES |= {
    "not_dsa": (["{d}/llama"], "'llama' has no DSA indexer"),
    "bad_topk": (["{d}/bad_topk"], "has 1 error: index_topk must be <= 202752"),
    "two_errors": (["{d}/two_errors"], "has 2 errors: (1) index_head_dim must be an integer"),
    "format_xml": (["{d}/good", "--format", "xml"], "argument --format: invalid choice: 'xml'"),
    "no_model_dir": ([], "the following arguments are required: model_dir"),
}
TOP_CASES = {
    "no_command": ([], "the following arguments are required: command"),
    "unknown_command": (["frobnicate"], "invalid choice: 'frobnicate'"),
}


@pytest.fixture
def hostile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of model directories, one per hostile config, plus special files; the cwd."""
    for name, content in MODELS.items():
        (tmp_path / name).mkdir()
        data = content if isinstance(content, bytes) else content.encode()
        (tmp_path / name / "config.json").write_bytes(data)
    (tmp_path / "read_only").mkdir()
    (tmp_path / "read_only" / "config.json").write_text(_glm())
    (tmp_path / "read_only" / "config.json").chmod(0o444)
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "dir_json" / "config.json").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo")
    with (tmp_path / "sparse").open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB that takes no disk
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


def _assert_refused(run, message: str, d: Path) -> None:
    assert run.code == 2 and run.out == ""
    assert run.err.count("\n") == 1 and run.err.endswith("\n"), "one line"
    assert run.err.startswith("glm-config") and "error: " in run.err
    assert message.replace("{d}", str(d)) in run.err
    assert "Traceback" not in run.err
    assert run.spawns == [] and run.children_after == 0


@pytest.mark.parametrize("case", sorted(SET_CASES))
def test_hostile_set(hostile_dir, case):
    argv, message = SET_CASES[case]
    before = tree(hostile_dir)
    run = run_in_process(main, ["set", *_argv(argv, hostile_dir)])
    _assert_refused(run, message, hostile_dir)
    assert tree(hostile_dir) == before


@pytest.mark.parametrize("case", sorted(SHOW_CASES))
def test_hostile_show(hostile_dir, case):
    argv, message = SHOW_CASES[case]
    before = tree(hostile_dir)
    run = run_in_process(main, ["show", *_argv(argv, hostile_dir)])
    _assert_refused(run, message, hostile_dir)
    assert tree(hostile_dir) == before


@pytest.mark.parametrize("case", sorted(TOP_CASES))
def test_hostile_top_level(hostile_dir, case):
    argv, message = TOP_CASES[case]
    run = run_in_process(main, argv)
    _assert_refused(run, message, hostile_dir)
    assert "see 'glm-config --help'" in run.err


@pytest.mark.parametrize(
    "case", ["bad_topk", "bad_freq", "bad_layers", "bad_types", "two_errors", "duplicate_key"]
)
def test_each_existing_error_is_named_once(hostile_dir, case):
    """One problem, one diagnostic: the count in the message is the number of problems."""
    run = run_in_process(main, ["set", *_argv(SET_CASES[case][0], hostile_dir)])
    want = 2 if case == "two_errors" else 1
    assert f"already has {want} error{'s' if want > 1 else ''}:" in run.err
    assert run.err.count("Fix:") == want  # one fix per error, and none added on top


# Resources: refused before anything of the hostile size exists ----------------------------------
@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS (KiB) of an ordinary ``set --dry-run`` in a fresh interpreter."""
    tmp = tmp_path_factory.mktemp("baseline")
    (tmp / "m").mkdir()
    (tmp / "m" / "config.json").write_text(_glm())
    argv = ["set", str(tmp / "m"), "index_topk_freq=4", "--dry-run"]
    run = run_measured("glm_config.cli", argv, tmp)
    assert run.code == 0 and "dry run: nothing written" in run.out
    return run.maxrss_kib


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "{d}/bad_layers"],  # transformers would build 100M-entry layer lists
        ["set", "{d}/bad_layers", "index_topk_freq=4"],
        ["show", "{d}/sparse"],
        ["set", "{d}/sparse", "index_topk_freq=4"],
        ["set", "{d}/good", "index_topk_pattern=" + "F" * 100_000],
    ],
    ids=["show_layers", "set_layers", "show_1GiB", "set_1GiB", "set_pattern_100k"],
)
def test_hostile_sizes_stay_small(hostile_dir, tmp_path_factory, baseline_rss, argv):
    before = tree(hostile_dir)
    tmp = tmp_path_factory.mktemp("measured")
    run = run_measured("glm_config.cli", _argv(argv, hostile_dir), tmp, cwd=hostile_dir)
    assert run.code == 2 and run.err.count("\n") == 1 and "Traceback" not in run.err
    assert run.spawns == [] and tree(hostile_dir) == before
    assert run.maxrss_kib <= baseline_rss + 8 * 1024  # no transformers, nothing big built


# Pipes --------------------------------------------------------------------------------------------
def _closed_stdout_run(*argv: str) -> subprocess.CompletedProcess:
    return run_into_closed_pipe("glm_config", *argv)


def test_closed_stdout_is_quiet_and_set_still_writes(hostile_dir):
    d = hostile_dir / "good"
    proc = _closed_stdout_run("set", str(d), "index_topk_freq=4")
    assert proc.stderr == "" and proc.returncode == 0
    assert json.loads((d / "config.json").read_text())["index_topk_freq"] == 4


@pytest.mark.parametrize(
    "argv", [["show", "{d}/good", "--format", "json"], ["--help"], ["set", "--help"]]
)
def test_closed_stdout_is_quiet(hostile_dir, argv):
    proc = _closed_stdout_run(*_argv(argv, hostile_dir))
    assert proc.stderr == "" and proc.returncode == 0


def test_show_into_head_dash_1_is_quiet(hostile_dir):
    cmd = f"{sys.executable} -m glm_config show {hostile_dir / 'good'} --format json | head -1"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.stdout == "{\n" and proc.stderr == "" and proc.returncode == 0


def test_ctrl_c_while_show_imports_transformers_is_one_line(tmp_path):
    """Ctrl-C during ``show``'s seconds of importing transformers: one line, exit 130 (before:
    a ``KeyboardInterrupt`` traceback)."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(MODELS["good"])
    proc, fired = run_interrupted_at_import(
        "glm-config", ["show", str(d)], "transformers", tmp_path
    )
    assert fired, "glm-config show never imported transformers: the test proves nothing"
    assert proc.returncode == 130 and proc.stderr == "glm-config: interrupted\n"
