"""``cpkv-validate`` starts fast, stops cleanly and speaks while it runs.

- Arguments are parsed and checked before torch is imported: ``--help``, ``--list-scenarios`` and
  every refusal run in an interpreter where importing torch fails (before, the package imported
  torch first: 10-24 s to refuse a misspelt flag on a loaded 2-core box). The http engine never
  imports torch.
- Ctrl-C while the console script imports torch is the one ``interrupted`` line and exit 130
  (before: a ``KeyboardInterrupt`` traceback).
- In a pipe or a log a line per finished scenario run (or completion) comes out as it finishes,
  before the table (before: nothing until the whole table, about 40 s for the default run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _fakes import honest, stub_server
from hostile_cli import run_interrupted_at_import

# Runs first in a fresh interpreter: importing torch (or a submodule) fails loudly.
NO_TORCH = """
import importlib.abc, sys
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"blocked: {name} (imported before it was needed)")
        return None
sys.meta_path.insert(0, _NoTorch())
from cpkv_validate.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _no_torch(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=cwd,
    )


def test_the_blocker_really_blocks_torch():
    """The negative control: a reference run needs torch, and the blocker stops it."""
    proc = _no_torch("--cp", "1", "--scenario", "tiny_extends", "--no-progress")
    assert proc.returncode != 0 and "blocked: torch" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--help"], 0, "usage: cpkv-validate"),
        (["--list-scenarios"], 0, "fresh_prompts_cp4"),
        (["--frobnicate"], 2, "unrecognized arguments: --frobnicate"),
        (["--cp", "0"], 2, "--cp must be >= 1"),
        (["--scenario", "nope"], 2, "unknown --scenario 'nope'"),
        (["--url", "ftp://h"], 2, "--url must start with http:// or https://"),
        (["--url", "http://127.0.0.1:9", "--max-tokens", "0"], 2, "--max-tokens must be >= 1"),
    ],
    ids=["help", "list", "flag", "cp", "scenario", "url", "max_tokens"],
)
def test_parsing_and_refusals_import_no_torch(argv, code, says):
    proc = _no_torch(*argv)
    assert proc.returncode == code, proc.stderr
    assert says in (proc.stdout if code == 0 else proc.stderr)
    assert "Traceback" not in proc.stderr


def _refserver_no_torch(*argv: str) -> subprocess.CompletedProcess:
    code = NO_TORCH.replace("cpkv_validate.cli import", "cpkv_validate.refserver import")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--help"], 0, "usage: python -m cpkv_validate.refserver"),
        (["--port", "70000"], 2, "--port must be in 0..65535"),
        (["--seed", "-1"], 2, "--seed must be in 0.."),
        (["--allocator", "buddy"], 2, "argument --allocator: invalid choice: 'buddy'"),
    ],
    ids=["help", "port", "seed", "allocator"],
)
def test_the_refserver_checks_its_arguments_without_torch(argv, code, says):
    """``python -m cpkv_validate.refserver`` parses, checks and binds before torch (before, it
    imported torch and the engine first: about 3 s to refuse ``--port 70000``)."""
    proc = _refserver_no_torch(*argv)
    assert proc.returncode == code, proc.stderr
    assert says in (proc.stdout if code == 0 else proc.stderr)
    assert "Traceback" not in proc.stderr


def test_the_refserver_needs_torch_once_its_arguments_are_good():
    """The negative control: good arguments go on to import the engine, which the blocker stops."""
    proc = _refserver_no_torch("--port", "0")
    assert proc.returncode != 0 and "blocked: torch" in proc.stderr


def test_the_http_engine_runs_without_torch(tmp_path):
    with stub_server(lambda prompt, nth: ("".join(honest(prompt, 4)), 4, "length")) as url:
        argv = ["--url", url, "--concurrency", "2", "--max-tokens", "4", "--min-compared", "4"]
        proc = _no_torch(*argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "OK: 2 requests" in proc.stdout


def test_ctrl_c_while_importing_torch_is_one_line(tmp_path):
    proc, fired = run_interrupted_at_import(
        "cpkv-validate", ["--cp", "1", "--scenario", "tiny_extends"], "torch", tmp_path
    )
    assert fired, "cpkv-validate never imported torch: the test proves nothing"
    assert proc.returncode == 130 and proc.stderr == "cpkv-validate: interrupted\n"
    assert proc.stdout == ""


def _merged(*argv: str) -> list[str]:
    """stdout and stderr of ``python -m cpkv_validate`` through one pipe, in order."""
    proc = subprocess.run(
        [sys.executable, "-m", "cpkv_validate", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout.splitlines()


def test_a_pipe_gets_a_line_per_scenario_run_before_the_table():
    lines = _merged(
        "--cp", "2", "--split", "zigzag", "--allocator", "sglang",
        "--scenario", "tiny_extends", "--scenario", "odd_extends",
    )  # fmt: skip
    progress = [i for i, line in enumerate(lines) if line.startswith("cpkv-validate: ")]
    assert [lines[i].split(" (")[0] for i in progress] == [
        "cpkv-validate: 1/2 PASS tiny_extends",
        "cpkv-validate: 2/2 PASS odd_extends",
    ]
    title = next(i for i, line in enumerate(lines) if line.startswith("cpkv-validate · "))
    assert progress[-1] < title  # printed as each run finished, not with the table


HTTP_3 = ["--concurrency", "2", "--max-tokens", "3", "--min-compared", "3"]


def test_a_pipe_gets_a_line_per_completion_before_the_table():
    with stub_server(lambda prompt, nth: ("".join(honest(prompt, 3)), 3, "length")) as url:
        lines = _merged("--url", url, *HTTP_3)
    progress = [i for i, line in enumerate(lines) if line.startswith("cpkv-validate: ")]
    # the reference, the batch and the reference again: 2 requests each
    assert len(progress) == 6 and "1/6 reference r0: 3 words (length)" in lines[progress[0]]
    title = next(i for i, line in enumerate(lines) if line.startswith("cpkv-validate · "))
    assert progress[-1] < title


def test_no_progress_silences_the_lines():
    with stub_server(lambda prompt, nth: ("".join(honest(prompt, 3)), 3, "length")) as url:
        lines = _merged("--url", url, *HTTP_3, "--no-progress")
    assert not [line for line in lines if line.startswith("cpkv-validate: ")]
