"""config.json on disk: a bounded read, and a replace that loses nothing.

Reading is ``cpkv_cli.read_json_object``: it opens non-blocking and checks the open descriptor, so
a FIFO or a device is refused without waiting on it, and reads at most 16 MiB.

:func:`replace_config` writes the new text only when it differs, and then:

1. refuses a read-only target (no write bit, or not writable by this user; root writes anything,
   so the mode bits decide) unless ``force``, and then keeps it read-only;
2. checks the file still holds the bytes that were read (a concurrent edit is not overwritten);
3. backs the old bytes up to ``config.json.bak-<UTC stamp>``: a temp file in the same directory,
   written in full, fsynced, given the original's mode and owner, then renamed (never a partial or
   empty backup; on failure the temp file is removed and nothing is left);
4. writes the new text the same way and renames it over config.json (readers see the old file or
   the new one); if that fails the backup is removed too, as the original is untouched.

A config.json that is a symlink (the Hugging Face cache links snapshots to content-addressed blobs)
is replaced by a regular file; the blob it pointed to, which other snapshots may share, is left
as it was. Mode and owner are the target's.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpkv_cli import read_bounded_file, read_json_object

from glm_config.errors import ConfigFileError, WriteRefusedError

_FIX = "give a model directory holding config.json"


def read_config_json(model_dir: str | Path) -> tuple[Path, dict[str, Any], str]:
    """Read ``model_dir/config.json`` (or a config.json path) with ``cpkv_cli.read_json_object``.

    Returns:
        ``(path, raw dict, original text)``.

    Raises:
        ConfigFileError: missing, not a regular file, over 16 MiB, unreadable, not UTF-8, not
            JSON (nested too deep, or an integer of over 4300 digits), or not an object.
    """
    path = Path(model_dir)
    try:
        if path.is_dir():
            path = path / "config.json"
    except OSError as exc:  # e.g. a name too long to stat
        raise ConfigFileError(f"cannot open {path}: {exc.strerror}.") from None
    text, raw = read_json_object(path, fix=_FIX, error=ConfigFileError)
    return path, raw, text


def read_only_filesystem(path: Path) -> str | None:
    """The read-only filesystem ``path``'s directory is on (``"/models (ext4)"``), or None.

    Checked on the directory, where the backup and the new file are created. On such a
    filesystem no mode change helps and ``--force`` cannot write (``EROFS``), so it is named
    apart from a read-only file (a mode), whose fix is ``chmod``.
    """
    directory = path.parent
    try:
        flags = os.statvfs(directory).f_flag
    except OSError:
        return None
    if not flags & os.ST_RDONLY:
        return None
    mount, fstype = _mount_of(directory)
    return f"{mount} ({fstype})" if fstype else str(mount)


def _mount_of(directory: Path) -> tuple[str, str | None]:
    """(mount point, filesystem type) holding ``directory``: the longest mount point in
    ``/proc/self/mountinfo`` that contains it (a bind mount shares its parent's device, so
    ``os.path.ismount`` cannot find it), else the nearest ``ismount`` ancestor."""
    target = str(directory.resolve())
    best: tuple[str, str | None] = ("", None)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5:
            continue
        point = parts[4].encode().decode("unicode_escape")  # "\040" in a name is a space
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, (rest.split() or [None])[0])
    if best[0]:
        return best
    p = Path(target)
    while not os.path.ismount(p):
        p = p.parent
    return str(p), None


def read_only(path: Path) -> str | None:
    """Why ``path`` counts as read-only (``"mode 0444"``), or None.

    The mode bits decide for root, which may write any file; anyone else is also refused what
    the kernel would refuse them.
    """
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o222:
        return f"mode {mode:04o}"
    if not os.access(path, os.W_OK):
        return f"mode {mode:04o}, owner uid {path.stat().st_uid}: not writable by this user"
    return None


@dataclass
class Written:
    """What :func:`replace_config` did."""

    backup: Path
    notes: list[str] = field(default_factory=list)


def replace_config(path: Path, original: str, new: str) -> Written:
    """Back up ``path`` and replace it with ``new`` (see the module docstring for each step).

    The caller has decided the write is allowed (read-only targets are refused by the caller
    unless forced) and that ``new`` differs from ``original``.

    Raises:
        WriteRefusedError: the file changed since it was read.
        OSError: a write, chmod or rename failed; nothing was left behind.
    """
    assert new != original and original, "only a change is written, never an empty backup"
    info = path.stat()  # the target, through a symlink
    notes = []
    if path.is_symlink():
        notes.append(
            f"{path} was a symlink to {os.readlink(path)}; it is now a regular file "
            f"(the link's target is unchanged)"
        )
    now = read_bounded_file(path, fix=_FIX, error=ConfigFileError)
    if now != original.encode("utf-8"):
        raise WriteRefusedError(
            f"{path} changed while glm-config was editing it; nothing written. Fix: run it again."
        )
    backup = _free_backup_name(path)
    owner_kept = _atomic_write(backup, original.encode("utf-8"), info)
    try:
        owner_kept &= _atomic_write(path, new.encode("utf-8"), info)
    except BaseException:
        backup.unlink(missing_ok=True)  # the original is untouched, so the backup is redundant
        raise
    _fsync_dir(path.parent)
    if not owner_kept:
        notes.append(
            f"{path} and its backup are owned by uid {os.geteuid()}, not {info.st_uid}:"
            f"{info.st_gid} (only root can give a file away)"
        )
    return Written(backup, notes)


def _free_backup_name(path: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists() or backup.is_symlink():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    return backup


def _atomic_write(dest: Path, data: bytes, like: os.stat_result) -> bool:
    """Write ``data`` to a temp file beside ``dest``, give it ``like``'s mode and owner, fsync,
    rename over ``dest``. Returns whether the owner was kept."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    owner_kept = True
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, stat.S_IMODE(like.st_mode))
        if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.fchown(fd, like.st_uid, like.st_gid)
            except PermissionError:
                owner_kept = False
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, dest)  # atomic on POSIX
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return owner_kept


def _fsync_dir(directory: Path) -> None:
    """Make the renames durable (a crash after rename could otherwise lose the new name)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
