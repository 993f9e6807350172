"""Where ``--json PATH`` goes, decided and checked before the run, and written after it.

Three kinds of target:

- ``stdout``: ``-``, or a path that is the file stdout already is (``/dev/stdout``,
  ``/proc/self/fd/1``): the JSON goes to stdout through ``cpkv_cli.emit`` (a full disk or a
  closed stdout is one line and exit 2) and the human table goes to stderr, so the report can
  be piped (``--json - | jq``). Before, ``-`` wrote a file named ``-`` and ``/dev/stdout`` was
  refused.
- ``direct``: a character device (``/dev/null``, a terminal) or a FIFO with a reader, written
  in place. A FIFO is opened at the check, without blocking: one nobody reads is refused then,
  and the one opened is the one written (opening and closing it would end its reader's input).
- ``replace``: a regular file or a new one (symlinks followed), written to a temporary file
  beside it and renamed over it, so a failed write or Ctrl-C leaves the file that was there.
  The directory is checked by creating and removing a file in it: permission bits alone say
  nothing as root, on a read-only mount or in /proc.

Anything else (a directory, a block device, a socket, a file under /proc or /sys) is refused.
Every refusal is one :class:`cpkv_cli.InputError` line.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cpkv_cli import InputError, emit

__all__ = ["JsonTarget", "json_target", "write_text"]


@dataclass
class JsonTarget:
    """A checked ``--json`` target: its ``kind``, the file it writes (``real``: symlinks
    followed, for ``replace``) and, for a FIFO, the descriptor opened at the check."""

    path: str
    kind: str
    real: Path | None = None
    fd: int | None = None


def _short(path: str | Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def _is_stdout(st: os.stat_result) -> bool:
    try:
        out = os.fstat(1)
    except OSError:  # fd 1 closed
        return False
    return (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino)


def json_target(path: str, flag: str = "--json") -> JsonTarget:
    """The target ``path`` names; :class:`InputError` when no report can be written there."""
    if path == "-":
        return JsonTarget(path, "stdout")
    if path == "" or path.endswith(os.sep):
        raise InputError(
            f"{flag} {path!r}: give a file path, e.g. {flag} report.json, or - for stdout"
        )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a name too long, a loop of links, a file used as a directory
        if exc.errno not in (errno.ENOTDIR, errno.ENAMETOOLONG):
            raise InputError(f"{flag} {_short(path)}: {exc.strerror}; give another path") from None
        st = None
    if st is not None and _is_stdout(st):
        return JsonTarget(path, "stdout")
    if st is None or stat.S_ISREG(st.st_mode):
        real = Path(os.path.realpath(path)) if st is not None else Path(path)
        if st is not None and real.parts[1:2] in (("proc",), ("sys",)):
            raise InputError(f"{flag} {_short(path)} is a kernel file; give a file path")
        _check_place(Path(path), real, flag)
        return JsonTarget(path, "replace", real)
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{flag} {_short(path)} is a directory; give a file path inside it")
    if stat.S_ISCHR(st.st_mode):
        return JsonTarget(path, "direct")
    if stat.S_ISFIFO(st.st_mode):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader
            raise InputError(
                f"{flag} {_short(path)} is not a regular file and nothing reads it "
                f"({exc.strerror}); give a file path, or - for stdout"
            ) from None
        os.set_blocking(fd, True)
        return JsonTarget(path, "direct", fd=fd)
    raise InputError(f"{flag} {_short(path)} is not a regular file; give a file path")


def _check_place(given: Path, real: Path, flag: str) -> None:
    parent = real.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(f"{flag} {_short(given)}: {parent} {what}; create it or give another path")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    size = len(real.name.encode(errors="surrogateescape"))
    if size > name_max:
        raise InputError(
            f"{flag}: the file name is {size} bytes; {parent} allows {name_max}; give a "
            f"shorter name"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{real.name[:32]}.", dir=parent)
    except OSError as exc:
        raise InputError(
            f"{flag} {_short(given)}: cannot create a file in {parent} ({exc.strerror}); give a "
            f"writable directory"
        ) from None
    os.close(fd)
    os.unlink(probe)


def write_text(target: JsonTarget, text: str) -> None:
    """Write ``text`` to ``target`` as its kind says.

    Raises:
        OSError: the write failed (``replace`` leaves the old file).
        cpkv_cli.OutputError: stdout could not take it.
    """
    if target.kind == "stdout":
        emit(text, end="")
        return
    if target.kind == "direct":
        fd = target.fd if target.fd is not None else os.open(target.path, os.O_WRONLY)
        target.fd = None
        try:
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        return
    assert target.real is not None
    path = target.real
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:32]}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
