"""Writes that never leave a broken or half-written work item behind.

`write_checked` re-runs `check` on the new text (in memory, with the rest of gov/work as
context) before touching the disk and refuses the write when it would introduce an error.
Errors the file already had are tolerated, so a broken item can still be repaired step by
step. The write itself goes to a temp file in the same directory, is fsynced, then renamed
over the target (`os.replace` is atomic on POSIX), so readers see the old or the new file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from govctl._checker import Checker
from govctl.errors import UsageError, WriteRefused


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) via temp file + fsync + rename, keeping its mode."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_checked(path: Path, new_text: str, *, root: Path, create: bool = False) -> None:
    """Write `new_text` to `path` only if it passes `check` (no new errors).

    Args:
        path: the work item file.
        new_text: its complete new content.
        root: repository root (schema, context items, artifacts).
        create: the file must not exist yet (`work new`); otherwise it must.

    Raises:
        UsageError: `create` and the file exists (or not `create` and it is missing).
        WriteRefused: the new text has errors the old one did not; the file is untouched.
    """
    if create and path.exists():
        raise UsageError(f"{path} already exists; pick another title")
    if not create and not path.is_file():
        raise UsageError(f"{path} does not exist")
    after = Checker([path], root=root, overrides={path: new_text}).run()
    if after.errors:
        before: set[tuple[str, str]] = set()
        if not create:
            before = {(d.code, d.message) for d in Checker([path], root=root).run().errors}
        new = [d for d in after.errors if (d.code, d.message) not in before]
        if new:
            lines = "\n".join(f"  {d}" for d in new)
            raise WriteRefused(
                f"refusing to write {path.name}: it would fail `govctl check`:\n{lines}", new
            )
    atomic_write(path, new_text)
