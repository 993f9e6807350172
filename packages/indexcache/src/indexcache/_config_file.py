"""``indexcache schedule --config``: a model directory or its config.json, as a JSON object.

The read itself is ``cpkv_cli.read_json_object`` (bounded, never blocking on a FIFO, one
:class:`cpkv_cli.InputError` line per failure); this module resolves the directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpkv_cli import InputError, read_json_object


def read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    """``(config.json path, object)`` for ``path``, a model directory or its config.json.

    Raises:
        InputError: as ``cpkv_cli.read_json_object``.
    """
    try:
        file = path / "config.json" if path.is_dir() else path
    except OSError as exc:  # e.g. a name too long to stat
        raise InputError(f"cannot open {path}: {exc.strerror}; give a model directory") from None
    _, raw = read_json_object(file, fix="give a model directory or its config.json")
    return file, raw
