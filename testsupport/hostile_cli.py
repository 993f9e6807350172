"""Run a CLI on hostile input and prove what it did not do: write, spawn, grow, or trace back.

- :func:`run_in_process`: exit code, stdout, stderr of ``main(argv)`` (argparse's SystemExit
  included), with every process spawn recorded through Python's audit hooks (``os.fork``,
  ``os.posix_spawn``, ``os.exec``, ``os.system``, ``subprocess.Popen``, ...) and the live children
  of this process counted from /proc before and after.
- :func:`tree`: a directory's files with size, mtime and mode, to compare before and after.
- :func:`run_into_closed_pipe`: ``python -m MODULE`` with stdout a pipe whose reader is gone
  before the first write (what ``| head`` does), for the quiet-on-EPIPE checks.
- :func:`run_measured`: the CLI in a fresh interpreter, with its peak RSS (``VmHWM`` of its own
  address space, read by the child as it exits: a child's ``ru_maxrss`` would include the pytest
  process it was forked from) and its spawns logged by the same audit hook; an address-space
  limit makes a regression fail with MemoryError instead of swapping the machine, and an optional
  file-size limit (``RLIMIT_FSIZE``) makes the kernel refuse writes past a size, a real failing
  write that stands in for a full disk.

- :func:`run_interrupted_at_import`: an installed console script with Ctrl-C (SIGINT) delivered
  the moment it first imports a given module (torch, transformers, sglang): the start-up, where
  a traceback used to come out instead of the one ``interrupted`` line and exit 130.
- :func:`run_interrupted_at_parse` and :func:`run_command_into_closed_pipe`: the same for any
  command line (a console script, ``python -m``), Ctrl-C arriving as it first parses its
  arguments, and stdout a pipe closed before the first write: the checks
  ``packages/cpkv-cli/tests/test_every_script.py`` runs against every cpkv command.

Both runners take ``refuse_spawns=True`` for a CLI whose regression would spawn without end (a
process per ``--cp`` rank, asked for a million ranks): the hook then raises at the first spawn,
which is still recorded, instead of letting the machine fork until it stops. ``run_measured``
also takes ``spawns_at_import=False`` and a larger ``address_space`` for a CLI that imports torch
(see :data:`TORCH_ADDRESS_SPACE` and :func:`run_measured`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
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
#: Address space for a fresh interpreter that imports torch: torch maps 2-4 GiB of libraries at
#: import, so the default 2 GiB would fail the import itself rather than a regression.
TORCH_ADDRESS_SPACE = 8 << 30
_REFUSED = "hostile-input test: {event} refused (a refusal must spawn nothing)"
_log: list[str] | None = None
_refuse = False
_hooked = False


def _hook(event: str, args: tuple) -> None:
    if _log is not None and event in SPAWN_EVENTS:
        _log.append(event)
        if _refuse:
            raise RuntimeError(_REFUSED.format(event=event))


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


def run_in_process(
    main: Callable[[Sequence[str]], int], argv: Sequence[str], *, refuse_spawns: bool = False
) -> Run:
    """``main(argv)`` with stdout/stderr captured and spawns recorded.

    Args:
        refuse_spawns: also raise ``RuntimeError`` at each spawn (after recording it), so a
            regression that spawns per unit of a hostile size fails at its first spawn instead
            of spawning them all in the pytest process.
    """
    global _log, _refuse, _hooked
    if not _hooked:
        sys.addaudithook(_hook)  # cannot be removed; it records only while _log is set
        _hooked = True
    before = live_children()
    out, err, _log, _refuse = io.StringIO(), io.StringIO(), [], refuse_spawns
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
        spawns = list(_log)
    finally:
        _log, _refuse = None, False
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
log, rss = open(sys.argv[1], "a"), sys.argv[2]
spawn, refuse, refused = {events!r}, {refuse!r}, {refused!r}
def hook(event, args):
    if event in spawn:
        log.write(event + "\\n")
        log.flush()
        if refuse:
            raise RuntimeError(refused.format(event=event))
if {at_import!r}:
    sys.addaudithook(hook)
limit, fsize = {address_space!r}, {fsize!r}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
if fsize is not None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
try:
    for name in {preimport!r}:
        __import__(name)
    from {module} import main
    if not {at_import!r}:
        sys.addaudithook(hook)
    code = main(sys.argv[3:])
finally:
    status = open("/proc/self/status").read()
    hwm = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    open(rss, "w").write(hwm)
sys.exit(code)
"""


def run_measured(
    module: str,
    argv: Sequence[str],
    tmp: Path,
    *,
    cwd: Path | None = None,
    fsize: int | None = None,
    address_space: int = 2 << 30,
    refuse_spawns: bool = False,
    spawns_at_import: bool = True,
    preimport: Sequence[str] = (),
    timeout: float = 300,
) -> Run:
    """``module.main(argv)`` in a fresh interpreter: exit code, output, spawns, peak RSS (KiB).

    Args:
        address_space: ``RLIMIT_AS`` in bytes; :data:`TORCH_ADDRESS_SPACE` for a module that
            imports torch.
        refuse_spawns: as in :func:`run_in_process`: the first spawn raises (and is logged).
        spawns_at_import: watch spawns from before ``import module`` (the default), or only from
            ``main`` on (False): importing torch runs ``/sbin/ldconfig -p`` itself
            (``torch.cuda`` imports ``cuda.pathfinder``, which calls
            ``ctypes.util.find_library``), a spawn that is not the CLI's and that
            ``refuse_spawns`` would turn into a failed import.
        preimport: modules imported before ``module`` (and, with ``spawns_at_import=False``,
            before spawns are watched): torch, for a CLI that imports it only once its arguments
            are checked, so torch's own ``ldconfig -p`` is not taken for the CLI's.
        timeout: only guards against a hang (the test then fails); nothing asserts on time.
    """
    log, rss = tmp / "spawn.log", tmp / "rss.txt"
    for f in (log, rss):
        f.write_text("")
    code = _RUNNER.format(
        events=sorted(SPAWN_EVENTS),
        refuse=refuse_spawns,
        refused=_REFUSED,
        at_import=spawns_at_import,
        address_space=address_space,
        fsize=fsize,
        module=module,
        preimport=tuple(preimport),
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(log), str(rss), *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=timeout,
    )
    run = Run(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        log.read_text().split(),
        maxrss_kib=int(rss.read_text() or 0),
    )
    print(run, f"\npeak RSS {run.maxrss_kib} KiB")
    return run


def run_into_closed_pipe(
    module: str, *argv: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m module argv...`` with stdout a pipe whose reader closed before the first
    write (so every write fails with EPIPE); stderr captured as text."""
    return run_command_into_closed_pipe([sys.executable, "-m", module], *argv, timeout=timeout)


#: Both sites' first lines: Ctrl-C as a terminal's foreground job has it, even where this process
#: inherited SIGINT ignored (every command of a script's background job does; CI ran a suite that
#: way and the Ctrl-C tests failed), and the file that notes the interrupt was sent.
_SITE_PREFIX = """
import os, signal
signal.signal(signal.SIGINT, signal.default_int_handler)
_note = os.environ["HOSTILE_CTRL_C_NOTE"]
"""

#: sitecustomize for :func:`run_interrupted_at_import`: a finder that sends this process SIGINT
#: when $HOSTILE_CTRL_C_AT (or a submodule) is first imported, and notes that it did.
_CTRL_C_SITE = (
    _SITE_PREFIX
    + """
import importlib.abc, sys
_at = os.environ["HOSTILE_CTRL_C_AT"]
class _CtrlC(importlib.abc.MetaPathFinder):
    fired = False
    def find_spec(self, name, path=None, target=None):
        if not _CtrlC.fired and (name == _at or name.startswith(_at + ".")):
            _CtrlC.fired = True
            open(_note, "w").write(name)
            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt at the next bytecode
        return None
sys.meta_path.insert(0, _CtrlC())
"""
)


def run_interrupted_at_import(
    script: str, argv: Sequence[str], module: str, tmp: Path, *, timeout: float = 300
) -> tuple[subprocess.CompletedProcess, bool]:
    """Run the console ``script`` (from this interpreter's bin directory) with ``argv``; Ctrl-C
    arrives as it first imports ``module``.

    Returns:
        (the finished process, stdout and stderr as text; whether the interrupt was sent: False
        means the command never imported ``module``, so the test proves nothing).
    """
    command = [str(Path(sys.executable).parent / script)]
    return _run_with_site(_CTRL_C_SITE, "ctrl-c", [*command, *argv], tmp, timeout,
                          HOSTILE_CTRL_C_AT=module)  # fmt: skip


def _run_with_site(
    site_source: str, tag: str, command: Sequence[str], tmp: Path, timeout: float, **env: str
) -> tuple[subprocess.CompletedProcess, bool]:
    """Run ``command`` with ``site_source`` as its sitecustomize (first on PYTHONPATH) and
    ``env`` added; whether the site noted that it sent the interrupt."""
    site = tmp / f"{tag}-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(site_source)
    note = tmp / f"{tag}-fired"
    note.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=timeout,
        env={**os.environ, **env, "PYTHONPATH": path, "HOSTILE_CTRL_C_NOTE": str(note)},
    )  # fmt: skip
    print(f"exit={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc, note.exists()


def run_command_into_closed_pipe(
    command: Sequence[str], *argv: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``command argv...`` with stdout a pipe whose reader closed before the first write."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            [*command, *argv], stdout=w, stderr=subprocess.PIPE, text=True, check=False,
            timeout=timeout,
        )  # fmt: skip
    finally:
        os.close(w)


#: sitecustomize for :func:`run_interrupted_at_parse`: SIGINT to this process when a parser
#: first parses (inside the command's ``main``, wherever it imports argparse), noted in a file.
_CTRL_C_AT_PARSE_SITE = (
    _SITE_PREFIX
    + """
import argparse
_parse = argparse.ArgumentParser.parse_known_args
def parse_known_args(self, *args, **kwargs):
    if not os.path.exists(_note):
        open(_note, "w").write(self.prog)
        os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt at the next bytecode
    return _parse(self, *args, **kwargs)
argparse.ArgumentParser.parse_known_args = parse_known_args
"""
)


def run_interrupted_at_parse(
    command: Sequence[str], argv: Sequence[str], tmp: Path, *, timeout: float = 300
) -> tuple[subprocess.CompletedProcess, bool]:
    """Run ``command argv...``; Ctrl-C arrives as it first parses its arguments.

    Returns:
        (the finished process, with stdout and stderr as text; whether the interrupt was sent:
        False means the command never parsed, so the test proves nothing).
    """
    return _run_with_site(_CTRL_C_AT_PARSE_SITE, "ctrl-c-parse", [*command, *argv], tmp, timeout)
