"""The README's two commands: the main one installs only what it runs, and it runs there; the
test command compiles bytecode as CI needs.

The main command's environment is built as the README's command builds it (``uv sync --frozen
--no-default-groups --package cpkv-validate``, into a scratch environment from uv's cache, hard
links) and one scenario runs in it. That run found ``numpy`` missing: torch.distributed's
``all_gather_object`` needs it and torch does not depend on it; the dev workspace had hidden it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block(marker: str) -> str:
    text = README.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
    return text.replace("```", "").strip()


def test_the_test_command_compiles_bytecode_as_ci_runs_it():
    command = _block("test-command")
    assert "uv sync --frozen --compile-bytecode" in command and command.endswith("scripts/test-all")
    assert "uv sync" not in (ROOT / ".ci" / "run").read_text().split("test_cmd=")[0].replace(
        "`uv sync --frozen --compile-bytecode`", ""
    )  # CI's only sync is the README's


@pytest.mark.slow
def test_the_main_command_installs_only_what_it_runs_and_runs(tmp_path: Path):
    command = _block("main-command")
    uv_args = re.search(r"uv run (.*) cpkv-validate$", command)
    assert uv_args, command
    flags = uv_args.group(1).split()
    assert flags == ["--frozen", "--no-default-groups", "--package", "cpkv-validate"]
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is not on PATH"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")}
    env.pop("VIRTUAL_ENV", None)
    sync = [uv, "sync", "--offline", "--quiet", *flags]
    subprocess.run(sync, cwd=ROOT, env=env, check=True, timeout=600)
    py = tmp_path / "venv" / "bin" / "python"
    names = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m; print(*{d.metadata['Name'].lower() "
         "for d in m.distributions()})"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert {"cpkv-validate", "cpkv-runtime", "indexcache", "torch", "rich", "numpy"} <= set(names)
    assert not {"sglang", "transformers", "pytest", "ruff", "cpkv-kernels"} & set(names)
    stated = re.search(r"(\d+) distributions", README)
    assert stated and int(stated.group(1)) == len(names), (len(names), sorted(names))
    run = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "cpkv-validate"), "--cp", "2", "--split", "zigzag",
         "--allocator", "sglang", "--scenario", "tiny_extends", "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: " in run.stdout
