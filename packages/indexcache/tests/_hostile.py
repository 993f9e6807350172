"""Run a CLI on hostile input and prove what it did not do: write, spawn, grow, or trace back.

- :func:`run_in_process`: exit code, stdout, stderr of ``main(argv)`` (argparse's SystemExit
  included), with every process spawn recorded through Python's audit hooks (``os.fork``,
  ``os.posix_spawn``, ``os.exec``, ``os.system``, ``subprocess.Popen``, ...) and the live children
  of this process counted from /proc before and after.
- :func:`tree`: a directory's files with size, mtime and mode, to compare before and after.
- :func:`run_measured`: the CLI in a fresh interpreter, with its peak RSS read from ``wait4`` (the
  rusage of that one child, not of every child pytest ever had) and its spawns logged by the same
  audit hook; an address-space limit makes a regression fail with MemoryError instead of
  swapping the machine, and an optional file-size limit (``RLIMIT_FSIZE``) makes the kernel refuse
  writes past a size, a real failing write that stands in for a full disk.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SPAWN_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
    }
)
_log: list[str] | None = None
_hooked = False


def _hook(event: str, args: tuple) -> None:
    if _log is not None and event in SPAWN_EVENTS:
        _log.append(event)


def live_children() -> int:
    """Children of this process alive now (every thread's /proc children list)."""
    total = 0
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            total += len((task / "children").read_text().split())
    return total


@dataclass
class Run:
    code: int
    out: str
    err: str
    spawns: list[str]
    children_after: int = 0
    maxrss_kib: int = 0

    def __str__(self) -> str:
        return f"exit={self.code} spawns={self.spawns}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def run_in_process(main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Run:
    """``main(argv)`` with stdout/stderr captured and spawns recorded."""
    global _log, _hooked
    if not _hooked:
        sys.addaudithook(_hook)  # cannot be removed; it records only while _log is set
        _hooked = True
    before = live_children()
    out, err, _log = io.StringIO(), io.StringIO(), []
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
        spawns = list(_log)
    finally:
        _log = None
    run = Run(code, out.getvalue(), err.getvalue(), spawns, live_children() - before)
    print(run)
    return run


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """``{relative path: (size, mtime_ns, mode)}`` of everything under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


_RUNNER = """
import resource, signal, sys
log = open(sys.argv[1], "a")
spawn = {events!r}
sys.addaudithook(lambda e, a: e in spawn and (log.write(e + "\\n"), log.flush()))
limit = {address_space}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
if {fsize} is not None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize}))
from {module} import main
sys.exit(main(sys.argv[2:]))
"""


def run_measured(
    module: str,
    argv: Sequence[str],
    tmp: Path,
    *,
    cwd: Path | None = None,
    fsize: int | None = None,
    address_space: int = 2 << 30,
    timeout: float = 300,
) -> Run:
    """``module.main(argv)`` in a fresh interpreter: exit code, output, spawns, peak RSS (KiB).

    ``timeout`` only guards against a hang (the test then fails); nothing asserts on time.
    """
    log, out, err = tmp / "spawn.log", tmp / "stdout.txt", tmp / "stderr.txt"
    for f in (log, out, err):
        f.write_text("")
    code = _RUNNER.format(
        events=sorted(SPAWN_EVENTS), address_space=address_space, fsize=fsize, module=module
    )
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(log), *argv], stdout=o, stderr=e, cwd=cwd
        )
        guard = threading.Timer(timeout, proc.kill)  # a hang fails the test instead of stalling
        guard.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        finally:
            guard.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    run = Run(
        proc.returncode,
        out.read_text(),
        err.read_text(),
        log.read_text().split(),
        maxrss_kib=usage.ru_maxrss,
    )
    print(run, f"\npeak RSS {run.maxrss_kib} KiB")
    return run
