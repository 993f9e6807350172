"""A JSON object from a file a user named, read without trusting the file.

Opened non-blocking and checked on the open descriptor: a FIFO or a device is refused without
waiting on it, a file swapped after the check is still the one checked, and no more than
``max_bytes`` is read. Every failure is one line naming the file (:class:`InputError`, or the
caller's own error class). What the object must hold is the caller's to check.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpkv_cli._messages import InputError, printable

MAX_CONFIG_BYTES = 16 * 2**20
"""Largest config.json read (16 MiB). Shipped ones are 1-10 KB, the largest we know (a
quantisation config listing every excluded module) tens of KB; the cap keeps ``/dev/zero`` or a
weights file given by mistake from being read into memory."""


def read_json_object(
    path: Path,
    *,
    fix: str,
    what: str = "a config.json",
    max_bytes: int = MAX_CONFIG_BYTES,
    error: Callable[[str], Exception] = InputError,
) -> tuple[str, dict[str, Any]]:
    """``(text, object)`` of the JSON object in the file ``path``.

    Args:
        fix: what to give instead, ending the messages about the wrong kind of file
            (``"give a model directory holding config.json"``).
        what: the file's kind in messages (``"a config.json"``).
        error: the exception class raised (called with the message).

    Raises:
        error: missing, not a regular file, over ``max_bytes``, unreadable, not UTF-8, not
            JSON (or nested too deep, or an integer of over 4300 digits), or not an object.
    """
    shown = printable(str(path))
    data = read_bounded_file(path, fix=fix, what=what, max_bytes=max_bytes, error=error)
    try:
        text = data.decode("utf-8")
        raw = json.loads(text)
    except UnicodeDecodeError as exc:
        raise error(f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{shown} is not valid JSON ({exc}); fix the file") from None
    except ValueError:  # Python parses no integer of over 4300 digits
        raise error(f"{shown} holds an integer of over 4300 digits; not {what}") from None
    except RecursionError:
        raise error(f"{shown} nests arrays or objects too deeply; not {what}") from None
    if not isinstance(raw, dict):
        raise error(f"{shown} must hold a JSON object; got {type(raw).__name__}")
    return text, raw


def read_bounded_file(
    path: Path,
    *,
    fix: str,
    what: str = "a config.json",
    max_bytes: int = MAX_CONFIG_BYTES,
    error: Callable[[str], Exception] = InputError,
) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes`` (arguments
    and failures as :func:`read_json_object`, less the JSON ones)."""
    shown = printable(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{shown} does not exist; {fix}") from None
    except OSError as exc:
        raise error(f"cannot open {shown}: {exc.strerror}; {fix}") from None
    except ValueError:  # a NUL in the name: no file can have it
        raise error(f"{shown} has a NUL byte in its name; {fix}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{shown} is not a regular file; {fix}")
        if info.st_size > max_bytes:
            raise error(
                f"{shown} is {info.st_size:,} bytes, over the {max_bytes:,} {what} may have "
                f"(a weights file?); {fix}"
            )
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {shown}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > max_bytes:  # grew after fstat
        raise error(f"{shown} grew past {max_bytes:,} bytes while being read; {fix}")
    return b"".join(chunks)
