"""The conventions, run against every cpkv command as a user starts it (a fresh process).

Every console script of the workspace (read from each member's ``pyproject.toml``, so a new one
fails here until it is listed below with its own bad input) and the one CLI started with
``python -m``, ``cpkv_validate.refserver``:

- a usage error (an option no command has) is one line ``prog...: error: ...`` on stderr, exit 2,
  nothing on stdout;
- a bad input (the command's own kind: a missing model, a URL, a bound) is one line, exit 2;
- ``--help`` into a pipe whose reader is gone ends quietly, exit 0, nothing on stderr;
- ``--help`` into a full disk (``> /dev/full``) or with stdout closed from the start (``>&-``)
  is one line ``prog: error: ...``, exit 2: the output is lost, so the command must not say it
  succeeded (before: ``cpkv-serve --help > /dev/full`` was a traceback and exit 1, and ``>&-``
  exit 0 with nothing written);
- Ctrl-C while it parses its arguments is ``prog: interrupted``, exit 130, no traceback;
- a bad value of each environment variable it reads (``cpkv_cli.environment.READ_BY``) is one
  line naming the variable and what it accepts, exit 2, from the launching process: before, a
  bad ``CPKV_BACKEND`` or ``CPKV_CP_SPLIT_MAX_BYTES`` made ``cpkv-validate`` exit 1 (its
  contamination code) with a traceback from every rank; ``--help`` lists exactly those variables.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cpkv_cli.environment import READ_BY, VARIABLES
from hostile_cli import run_command_into_closed_pipe, run_interrupted_at_parse

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

#: command -> (the name its messages start with, argv of a bad input of its own kind)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "cpkv-serve": ("cpkv-serve", ["--model-path", "/nonexistent/model"]),
    "cpkv-validate": ("cpkv-validate", ["--url", "ftp://example.invalid"]),
    "python -m cpkv_validate.refserver": ("python -m cpkv_validate.refserver", ["--port", "70000"]),
    "deepgemm-compat": ("deepgemm-compat", ["plan", "--chunked", "0"]),
    "glm-config": ("glm-config", ["show", "/nonexistent/model"]),
    "indexcache": ("indexcache", ["schedule", "--layers", "0"]),
    "govctl": ("govctl", ["check", "/nonexistent/gov"]),
}


def workspace_scripts() -> set[str]:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts: set[str] = set()
    for pattern in root["tool"]["uv"]["workspace"]["members"]:
        for member in sorted(ROOT.glob(pattern)):
            meta = tomllib.loads((member / "pyproject.toml").read_text())["project"]
            scripts.update(meta.get("scripts", {}))
    return scripts


def command_line(command: str) -> list[str]:
    if command.startswith("python -m "):
        return [sys.executable, "-m", command.removeprefix("python -m ")]
    return [str(BIN / command)]


def test_every_console_script_is_checked_here():
    scripts = workspace_scripts()
    assert len(scripts) == 6, scripts
    assert scripts | {"python -m cpkv_validate.refserver"} == set(COMMANDS)


def _one_error_line(proc, prog: str) -> None:
    assert proc.returncode == 2, proc
    assert proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert proc.stderr.startswith(prog) and ": error: " in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_usage_error_is_one_line_and_exit_2(command):
    proc = subprocess.run(
        [*command_line(command), "--no-such-option"], capture_output=True, text=True, timeout=300
    )
    _one_error_line(proc, COMMANDS[command][0])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_input_is_one_line_and_exit_2(command):
    prog, argv = COMMANDS[command]
    proc = subprocess.run(
        [*command_line(command), *argv], capture_output=True, text=True, timeout=300
    )
    _one_error_line(proc, prog)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_into_a_closed_pipe_is_quiet(command):
    proc = run_command_into_closed_pipe(command_line(command), "--help")
    assert (proc.returncode, proc.stderr) == (0, ""), proc


@pytest.mark.parametrize("stdout", ["full", "closed"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_that_cannot_be_written_is_one_line_and_exit_2(command, stdout):
    """``> /dev/full`` and ``>&-``, as a shell sets them up (bash: the command's own fd 1)."""
    redirect = "> /dev/full" if stdout == "full" else ">&-"
    line = " ".join(shlex.quote(a) for a in [*command_line(command), "--help"])
    proc = subprocess.run(
        ["bash", "-c", f"{line} {redirect}"], capture_output=True, text=True, timeout=300
    )
    prog = COMMANDS[command][0]
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"{prog}: error: "), proc.stderr
    assert ("No space left" if stdout == "full" else "stdout is closed") in proc.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ctrl_c_is_one_line_and_exit_130(command, tmp_path):
    prog, argv = COMMANDS[command]
    proc, fired = run_interrupted_at_parse(command_line(command), argv, tmp_path)
    assert fired, "the command never parsed its arguments: nothing was interrupted"
    assert (proc.returncode, proc.stderr) == (130, f"{prog}: interrupted\n"), proc


#: command -> argv that runs it on good input (a bad variable must stop it before that work)
ENV_ARGV: dict[str, list[str]] = {
    "cpkv-serve": ["--model-path", "/nonexistent/model", "--dry-run", "--gpu", "sm90"],
    "cpkv-validate": ["--scenario", "tiny_extends", "--no-progress"],
    "python -m cpkv_validate.refserver": ["--port", "0"],  # would serve until stopped
    "deepgemm-compat": ["doctor", "--no-import"],
}
#: variable -> a bad value (README.md stands for a file where a directory is wanted)
BAD: dict[str, str] = {
    "CPKV_BACKEND": "nonsense",
    "CPKV_DEBUG": "maybe",
    "CPKV_EXTRA_BACKENDS": "not a module:callable",
    "CPKV_CP_SPLIT_MAX_BYTES": "abc",
    "CPKV_LAYOUT_MAX_BYTES": "-5",
    "CPKV_CACHE_DIR": str(ROOT / "README.md"),
    "CPKV_DISABLE_HOOKS": "Deepgemm Warmup",
    "CPKV_SHARED_KV": "maybe",
    "CPKV_ALLOW_UNTESTED_SGLANG": "2",
    "CPKV_DEEPGEMM_FAST_TO_CHUNK": "fast",
    "CPKV_HOOKS_RECORD_DIR": str(ROOT / "README.md"),
    "CPKV_DEBUG_FAULT": "Swap KV",
    "CPKV_DEBUG_FAULT_ACK": "yes",
    "CPKV_DEBUG_BREAK_HOOK": "no such hook",
    "DEEPGEMM_COMPAT_M_LIST": "upstream",
    "DEEPGEMM_COMPAT_MIN_SGL_KERNEL": "newest",
    "DEEPGEMM_COMPAT_SKIP_CHECKS": "maybe",
    "DEEPGEMM_COMPAT_ALLOW_UNTESTED": "2",
}
ENV_CASES = [(c, v.name) for c, vs in sorted(READ_BY.items()) for v in vs]


def test_every_command_says_which_variables_it_reads():
    assert set(READ_BY) == set(COMMANDS)
    assert {c for c, vs in READ_BY.items() if vs} == set(ENV_ARGV)
    assert set(BAD) == {v for _, v in ENV_CASES}


@pytest.mark.parametrize(("command", "name"), ENV_CASES)
def test_a_bad_environment_variable_is_one_line_and_exit_2(command, name):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    proc = subprocess.run(
        [*command_line(command), *ENV_ARGV[command]],
        capture_output=True, text=True, timeout=120, env={**env, name: BAD[name]},
    )  # fmt: skip
    _one_error_line(proc, COMMANDS[command][0])
    assert f": error: {name}=" in proc.stderr, proc.stderr
    assert f"expected {VARIABLES[name].accepts}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_lists_the_variables_it_reads(command):
    proc = subprocess.run(
        [*command_line(command), "--help"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc
    listed = re.findall(r"^  ((?:CPKV|DEEPGEMM_COMPAT)_[A-Z0-9_]+)$", proc.stdout, re.MULTILINE)
    assert listed == [v.name for v in READ_BY[command]], listed
