"""Run the installed ``cpkv-serve`` script and prove what it did not do: import, spawn, grow, write.

The script runs in a fresh interpreter whose ``sitecustomize`` (from a directory put first on
``PYTHONPATH``) installs, before anything of cpkv loads:

- an import blocker: importing a listed top-level module (``sglang``, ``torch``...) prints
  ``GUARD: import of <name> blocked`` on stderr and ends the process with status 97, so a refusal
  that happens "before SGLang is imported" is checked by SGLang not being imported, not by time;
- a spawn log: Python's audit events for every way of starting a process (``os.fork``,
  ``os.posix_spawn``, ``os.exec``, ``subprocess.Popen``, ...), appended to a file;
- the peak resident set size, ``VmHWM`` of its own address space, written at exit (a child's
  ``ru_maxrss`` would count the pytest process it was forked from).

The wall time is measured and printed, never asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("cpkv-serve")
GUARD_EXIT = 97
SPAWN_EVENTS = (
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.exec",
    "os.spawn",
    "os.system",
    "subprocess.Popen",
)
_SITECUSTOMIZE = f"""
import atexit, os, sys

_blocked = set(filter(None, os.environ.get("CPKV_GUARD_BLOCK", "").split(",")))
_spawn_log, _rss_file = os.environ["CPKV_GUARD_SPAWN_LOG"], os.environ["CPKV_GUARD_RSS"]


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _blocked:
            sys.stderr.write("GUARD: import of " + name + " blocked\\n")
            sys.stderr.flush()
            os._exit({GUARD_EXIT})
        return None


sys.meta_path.insert(0, _Blocker())


def _audit(event, args):
    if event in {SPAWN_EVENTS!r}:
        with open(_spawn_log, "a") as f:
            f.write(event + "\\n")


sys.addaudithook(_audit)


def _peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(_rss_file, "w").write(line.split()[1])


atexit.register(_peak_rss)
"""


@dataclass
class Run:
    """What one guarded run did."""

    code: int
    out: str
    err: str
    spawns: list[str]
    peak_rss_kib: int
    seconds: float

    def __str__(self) -> str:
        return (
            f"exit={self.code} spawns={self.spawns} peak RSS {self.peak_rss_kib} KiB "
            f"{self.seconds:.2f} s\nstdout:\n{self.out}\nstderr:\n{self.err}"
        )


def guarded_run(
    argv: list[str],
    guard_dir: Path,
    *,
    cwd: Path,
    block: tuple[str, ...] = ("sglang",),
    env: dict[str, str] | None = None,
    stdout: int | None = subprocess.PIPE,
    timeout: float = 600,
) -> Run:
    """``cpkv-serve argv`` under the guard; ``guard_dir`` holds the guard's own files.

    Args:
        block: top-level modules whose import ends the run (status :data:`GUARD_EXIT`).
        env: extra environment variables.
        stdout: where the child's stdout goes (a closed pipe's write end, for the pipe tests).
        timeout: only against a hang (the test then fails); nothing asserts on time.
    """
    guard_dir.mkdir(parents=True, exist_ok=True)
    (guard_dir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    spawn_log, rss = guard_dir / "spawns.log", guard_dir / "rss.txt"
    for f in (spawn_log, rss):
        f.write_text("")
    pythonpath = os.pathsep.join(filter(None, [str(guard_dir), os.environ.get("PYTHONPATH")]))
    full_env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "CPKV_GUARD_BLOCK": ",".join(block),
        "CPKV_GUARD_SPAWN_LOG": str(spawn_log),
        "CPKV_GUARD_RSS": str(rss),
        **(env or {}),
    }
    start = time.perf_counter()
    proc = subprocess.run(
        [str(SCRIPT), *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )
    run = Run(
        proc.returncode,
        proc.stdout or "",
        proc.stderr,
        spawn_log.read_text().split(),
        int(rss.read_text() or 0),
        time.perf_counter() - start,
    )
    print(run)
    return run


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of everything under ``root``."""
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }
