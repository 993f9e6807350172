"""What the ``indexcache`` CLI needs from its surroundings, made safe against hostile input.

- :class:`OneLineParser`: a usage error is one line on stderr and exit 2 (argparse's own prints
  the whole usage first).
- :func:`emit`: a reader that closes stdout early (``| head -1``) ends the output quietly; the
  command still finishes and returns its own exit status.
- :func:`read_config`: reads a config.json without hanging on a FIFO or device and without reading
  more than ``MAX_CONFIG_BYTES``; every failure is one :class:`CliInputError` line.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, NoReturn

MAX_CONFIG_BYTES = 16 * 2**20
"""Largest config.json read (16 MiB). Shipped ones are 1-10 KB, and the largest we know (a
quantisation config listing every excluded module) tens of KB; the cap keeps ``--config
/dev/zero`` or a weights file given by mistake from being read into memory."""


class CliInputError(Exception):
    """Bad command-line input, reported as one ``error: ...`` line with exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``prog: error: ...; see prog --help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def emit(text: str) -> None:
    """Print ``text`` to stdout; once the reader has gone, drop this and all later output.

    A closed pipe is not an error of the command (``indexcache schedule ... | head -1`` got what
    it asked for), so there is no traceback and the exit status stays the command's own. Output
    goes to /dev/null from then on, so the flush at exit does not fail either.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a fd
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, like stdout
    finally:
        os.close(devnull)


def read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    """``path`` (a model directory or its config.json) read as a JSON object.

    Opened non-blocking and checked on the open descriptor, so a FIFO or device is refused without
    waiting on it and a file swapped after a check is still the one checked.

    Raises:
        CliInputError: missing, not a regular file, larger than ``MAX_CONFIG_BYTES``, unreadable,
            not UTF-8, not JSON (or nested too deep, or an integer of over 4300 digits), or not
            a JSON object.
    """
    file = path
    try:
        file = path / "config.json" if path.is_dir() else path
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CliInputError(
            f"{file} does not exist; give a model directory or its config.json."
        ) from None
    except OSError as exc:
        raise CliInputError(
            f"cannot open {path}: {exc.strerror}; give a model directory."
        ) from None
    try:
        data = _read_regular(fd, file)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:  # grew after fstat
        raise CliInputError(f"{file} is over {MAX_CONFIG_BYTES:,} bytes; give a config.json.")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CliInputError(
            f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})."
        ) from None
    except json.JSONDecodeError as exc:
        raise CliInputError(f"cannot read {file} as JSON: {exc}.") from None
    except ValueError:  # Python parses no integer of over 4300 digits
        raise CliInputError(f"{file} holds an integer of over 4300 digits; not a config.") from None
    except RecursionError:
        raise CliInputError(f"{file} nests arrays or objects too deeply; not a config.") from None
    if not isinstance(raw, dict):
        raise CliInputError(f"{file} must hold a JSON object; got {type(raw).__name__}.")
    return file, raw


def _read_regular(fd: int, file: Path) -> bytes:
    """At most ``MAX_CONFIG_BYTES + 1`` bytes of ``fd``, which must be a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise CliInputError(f"{file} is not a regular file; give a model directory.")
    if info.st_size > MAX_CONFIG_BYTES:
        raise CliInputError(
            f"{file} is {info.st_size:,} bytes; a config.json is at most "
            f"{MAX_CONFIG_BYTES:,} (16 MiB). Fix: give the model's config.json, not weights."
        )
    chunks, size = [], 0
    try:
        while size <= MAX_CONFIG_BYTES and (chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise CliInputError(f"cannot read {file}: {exc.strerror}.") from None
    return b"".join(chunks)
