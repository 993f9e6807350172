"""Environment capture: real git repositories, a real subprocess without torch, the real GPU."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from benchkit import capture_env, device_label, git_state

FIELDS = {
    "gpu_name", "gpu_count", "sm_count", "gpu_driver", "cpu", "cpu_count", "cpu_threads",
    "python", "torch", "torch_git", "cuda", "triton", "pkg_version", "git_commit", "git_dirty",
    "command", "timestamp",
}  # fmt: skip


def test_cpu_env_fields():
    env = capture_env(package="benchkit", command="python bench.py --quick")
    assert set(env) == FIELDS
    assert env["gpu_name"] is None and env["gpu_count"] == 0
    assert env["torch"] == torch.__version__ and env["cuda"] == torch.version.cuda
    assert env["pkg_version"] == metadata.version("benchkit")
    assert env["command"] == "python bench.py --quick"
    stamp = dt.datetime.fromisoformat(env["timestamp"])
    assert stamp.utcoffset() == dt.timedelta(0)  # UTC, and the zone is written out
    assert env["timestamp"].endswith("+00:00")


def test_default_command_is_this_process_as_typed():
    assert capture_env()["command"] == shlex.join([Path(sys.executable).name, *sys.argv])


def test_package_version_without_metadata_comes_from_the_imported_module(monkeypatch):
    mod = type(sys)("not_installed_pkg")
    mod.__version__ = "9.9"
    monkeypatch.setitem(sys.modules, "not_installed_pkg", mod)
    assert capture_env(package="not-installed-pkg")["pkg_version"] == "9.9 (checkout)"
    assert capture_env(package="nowhere-pkg")["pkg_version"] == "unknown (not installed)"
    monkeypatch.setitem(sys.modules, "unversioned_pkg", type(sys)("unversioned_pkg"))
    assert capture_env(package="unversioned-pkg")["pkg_version"] == "unknown (checkout)"


def test_a_benchmark_without_torch_does_not_import_it():
    code = (
        "import sys, json, benchkit; env = benchkit.capture_env(); "
        "print(json.dumps([env['torch'], env['cuda'], 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [metadata.version("torch"), None, False]


def test_bad_device_is_named():
    with pytest.raises(ValueError, match="device='gpu0': pass 'cpu' or a CUDA device"):
        capture_env(device="gpu0")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_git_state_of_a_checkout(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_state(tmp_path) == {"git_commit": head, "git_dirty": False}
    (tmp_path / "untracked.txt").write_text("x")  # untracked files do not make it dirty
    assert git_state(tmp_path)["git_dirty"] is False
    (tmp_path / "a.txt").write_text("2")
    assert git_state(tmp_path) == {"git_commit": head, "git_dirty": True}


def test_git_state_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == {"git_commit": None, "git_dirty": None}


@pytest.mark.parametrize(("row", "label"), [
    ({"gpu_name": "NVIDIA H200"}, "NVIDIA H200"), ({"gpu_name": None}, "cpu"), ({}, "cpu"),
])  # fmt: skip
def test_device_label(row, label):
    assert device_label(row) == label


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_env_describes_the_gpu():
    env = capture_env(device="cuda")
    props = torch.cuda.get_device_properties(0)
    assert env["gpu_name"] == props.name and env["sm_count"] == props.multi_processor_count
    assert env["gpu_count"] == torch.cuda.device_count()
    assert env["gpu_driver"]  # /proc/driver/nvidia/version or nvidia-smi


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep  2 2025\n",
         "580.95.05"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n",
         "580.159.04"),
        ("GCC version: gcc 12.3\n", None),
        ("NVRM version: NVIDIA UNIX Kernel Module for x86_64\n", None),
    ],
)  # fmt: skip
def test_driver_from_proc(text, want):
    """Both module flavours' first lines; the open one put "for" where the version was read."""
    from benchkit._env import driver_from_proc

    assert driver_from_proc(text) == want
