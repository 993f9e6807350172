"""Where, with what and when a benchmark ran: the fields every record row carries."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def capture_env(
    *, device: str = "cpu", package: str | None = None, command: str | None = None
) -> dict[str, object]:
    """The environment fields of a benchmark row.

    torch is described only if this process has already imported it (a benchmark that times
    torch has), so a CPU-only benchmark such as govctl's does not pay for importing it; its
    version then comes from the installed metadata.

    Args:
        device: ``"cpu"`` or a CUDA device (``"cuda"``, ``"cuda:1"``) to describe.
        package: distribution whose version goes in ``pkg_version`` (e.g. ``"cpkv-kernels"``); in
            a checkout on ``PYTHONPATH`` (no metadata) the imported module's ``__version__``.
        command: the command line to record; default: this process's, as typed.

    Returns:
        ``gpu_name`` (None on CPU), ``gpu_count``, ``sm_count``, ``gpu_driver``, ``cpu``,
        ``cpu_count``, ``cpu_threads``, ``python``, ``torch``, ``torch_git``, ``cuda``,
        ``triton``, ``pkg_version``, ``git_commit``, ``git_dirty``, ``command`` and
        ``timestamp`` (UTC, ISO 8601 with its ``+00:00`` zone).
    """
    torch = sys.modules.get("torch")
    env: dict[str, object] = {
        "gpu_name": None,
        "gpu_count": 0,
        "sm_count": None,
        "gpu_driver": None,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads() if torch else None,
        "python": platform.python_version(),
        "torch": torch.__version__ if torch else _dist_version("torch"),
        "torch_git": getattr(torch.version, "git_version", None) if torch else None,
        "cuda": torch.version.cuda if torch else None,
        "triton": _dist_version("triton"),
        "pkg_version": _package_version(package) if package else None,
        **git_state(_script_dir()),
        "command": command or shlex.join([Path(sys.executable).name, *sys.argv]),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if device.startswith("cuda"):
        import torch

        props = torch.cuda.get_device_properties(torch.device(device))
        env |= {
            "gpu_name": props.name,
            "gpu_count": torch.cuda.device_count(),
            "sm_count": props.multi_processor_count,
            "gpu_driver": gpu_driver(),
            "torch": torch.__version__,
            "torch_git": getattr(torch.version, "git_version", None),
            "cuda": torch.version.cuda,
            "cpu_threads": torch.get_num_threads(),
        }
    elif device != "cpu":
        raise ValueError(f"device={device!r}: pass 'cpu' or a CUDA device such as 'cuda'")
    return env


def device_label(row: dict[str, object]) -> str:
    """The device a row was measured on: its ``gpu_name``, or ``"cpu"`` for a CPU row.

    Rows of one label replace each other on merge; every CPU counts as one device, as the
    benchmarks' CPU runs are smoke runs of one shared build machine.
    """
    return str(row.get("gpu_name") or "cpu")


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``'s model name), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def driver_from_proc(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version``'s text: the first dotted number after
    "Kernel Module" ("NVIDIA UNIX Kernel Module  580.95.05 ..." and, for the open modules,
    "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...")."""
    _, found, after = text.partition("Kernel Module")
    words = after.split() if found else []
    return next((w for w in words if re.fullmatch(r"\d+(\.\d+)+", w)), None)


def gpu_driver() -> str | None:
    """The NVIDIA kernel driver version, from ``/proc`` or ``nvidia-smi``; None if neither says."""
    try:
        found = driver_from_proc(Path("/proc/driver/nvidia/version").read_text())
        if found:
            return found
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def git_state(cwd: Path | str | None = None) -> dict[str, object]:
    """``git_commit`` (HEAD) and ``git_dirty`` (tracked files changed) of the checkout, or None.

    A copy of the tree without ``.git`` (as shipped to a GPU box) gives None for both.
    """

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit.strip(), "git_dirty": bool(status.strip()) if status else False}


def _script_dir() -> Path | None:
    """The running script's folder: git finds its checkout from there, whatever the cwd."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    return script.resolve().parent if script and script.is_file() else None


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _package_version(dist: str) -> str:
    found = _dist_version(dist)
    if found:
        return found
    module = sys.modules.get(dist.replace("-", "_"))
    if module is None:
        return "unknown (not installed)"
    version = getattr(module, "__version__", None)
    return f"{version} (checkout)" if version else "unknown (checkout)"
