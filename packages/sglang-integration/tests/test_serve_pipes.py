"""``cpkv-serve`` with a closed stdout, and ``--help``: cpkv's flags before SGLang is imported.

A closed stdout is made by closing the read end of a pipe before the child starts, so its first
write fails with EPIPE (a reader that closes later may leave the write in the pipe's buffer).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _serve_guard import GUARD_EXIT, guarded_run
from sglang_cpkv.serve._flags import build_parser
from sglang_cpkv.serve._sglang_options import sglang_help

GLM51 = Path(__file__).parent / "fixtures" / "glm51_fp8"
QUIET = ("Traceback", "BrokenPipe", "Exception ignored")


def _closed_stdout() -> int:
    """The write end of a pipe whose reader is already gone (the caller closes it after use)."""
    read, write = os.pipe()
    os.close(read)
    return write


def _run_closed(argv: list[str], tmp_path: Path, **kw) -> object:
    fd = _closed_stdout()
    try:
        return guarded_run(argv, tmp_path / "guard", cwd=tmp_path, stdout=fd, **kw)
    finally:
        os.close(fd)


@pytest.mark.parametrize("flag", ["--cpkv-help", "--help"])
def test_help_into_a_closed_pipe_is_quiet(flag, tmp_path):
    """``cpkv-serve --help | head -0``: exit 0, nothing on stderr, and SGLang never imported."""
    run = _run_closed([flag], tmp_path, block=("sglang", "torch"))
    assert run.code == 0, run
    assert run.err == "", run


def test_refusal_into_a_closed_pipe_is_one_line(tmp_path):
    run = _run_closed(["--model-path", "/nonexistent", "--dry-run", "--gpu", "sm90"], tmp_path)
    assert run.code == 2, run
    assert run.err == (
        "cpkv-serve: error: --model-path /nonexistent does not exist; give a local model "
        "directory holding config.json or a repo id such as zai-org/GLM-5.1\n"
    )


def test_help_prints_cpkv_flags_and_sglangs_without_importing_sglang(tmp_path):
    """cpkv's help, then SGLang's options listed from the table read from the installed
    release's parser: no SGLang, torch or transformers import (before: SGLang imported for its
    help, 15-66 s)."""
    run = guarded_run(
        ["--help"], tmp_path / "guard", cwd=tmp_path, block=("sglang", "torch", "transformers")
    )
    assert run.code == 0 and run.err == "", run
    assert run.out == build_parser().format_help() + "\n--- sglang serve ---\n" + sglang_help()


def test_help_of_another_sglang_release_comes_from_sglang(tmp_path, monkeypatch):
    """The table is one release's: with another installed, SGLang prints its own help (the
    guard stops that import here, after cpkv's help is out)."""
    site = tmp_path / "site"
    (site / "sglang-0.5.21.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.21.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    run = guarded_run(["--help"], tmp_path / "guard", cwd=tmp_path, block=("sglang", "torch"))
    assert run.code == GUARD_EXIT, run
    assert run.out == build_parser().format_help() + "\n--- sglang serve ---\n"
    assert run.err == "GUARD: import of sglang blocked\n"


@pytest.mark.slow
def test_dry_run_into_a_closed_pipe_is_quiet(tmp_path):
    """The whole dry run (SGLang imported, arguments resolved), its report into a closed pipe."""
    run = _run_closed(
        ["--model-path", str(GLM51), "--tp", "8", "--dry-run", "--gpu", "sm90"],
        tmp_path,
        block=(),
    )
    assert run.code == 0, run
    assert not any(word in run.err for word in QUIET), run
    # SGLang's JIT arch probe warned about this machine, which a --gpu run does not describe
    assert "Cannot detect CUDA architecture" not in run.err, run
