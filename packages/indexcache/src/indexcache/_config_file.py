"""``indexcache schedule --config``: a model's config.json, read without trusting it.

Opened non-blocking and checked on the open descriptor, so a FIFO or device is refused without
waiting on it, a file swapped after a check is still the one checked, and no more than
:data:`MAX_CONFIG_BYTES` is read; every failure is one :class:`cpkv_cli.InputError` line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from cpkv_cli import InputError

MAX_CONFIG_BYTES = 16 * 2**20
"""Largest config.json read (16 MiB). Shipped ones are 1-10 KB, and the largest we know (a
quantisation config listing every excluded module) tens of KB; the cap keeps ``--config
/dev/zero`` or a weights file given by mistake from being read into memory."""


def read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    """``path`` (a model directory or its config.json) read as a JSON object.

    Opened non-blocking and checked on the open descriptor, so a FIFO or device is refused without
    waiting on it and a file swapped after a check is still the one checked.

    Raises:
        InputError: missing, not a regular file, larger than ``MAX_CONFIG_BYTES``, unreadable,
            not UTF-8, not JSON (or nested too deep, or an integer of over 4300 digits), or not
            a JSON object.
    """
    file = path
    try:
        file = path / "config.json" if path.is_dir() else path
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(
            f"{file} does not exist; give a model directory or its config.json."
        ) from None
    except OSError as exc:
        raise InputError(f"cannot open {path}: {exc.strerror}; give a model directory.") from None
    try:
        data = _read_regular(fd, file)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:  # grew after fstat
        raise InputError(f"{file} is over {MAX_CONFIG_BYTES:,} bytes; give a config.json.")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"cannot read {file} as JSON: {exc}.") from None
    except ValueError:  # Python parses no integer of over 4300 digits
        raise InputError(f"{file} holds an integer of over 4300 digits; not a config.") from None
    except RecursionError:
        raise InputError(f"{file} nests arrays or objects too deeply; not a config.") from None
    if not isinstance(raw, dict):
        raise InputError(f"{file} must hold a JSON object; got {type(raw).__name__}.")
    return file, raw


def _read_regular(fd: int, file: Path) -> bytes:
    """At most ``MAX_CONFIG_BYTES + 1`` bytes of ``fd``, which must be a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{file} is not a regular file; give a model directory.")
    if info.st_size > MAX_CONFIG_BYTES:
        raise InputError(
            f"{file} is {info.st_size:,} bytes; a config.json is at most "
            f"{MAX_CONFIG_BYTES:,} (16 MiB). Fix: give the model's config.json, not weights."
        )
    chunks, size = [], 0
    try:
        while size <= MAX_CONFIG_BYTES and (chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read {file}: {exc.strerror}.") from None
    return b"".join(chunks)
