"""Usage errors on one line, and output that ends quietly when its reader goes away."""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, NoReturn


class OutputError(Exception):
    """stdout cannot be written (a full disk, a file over its size limit, ``> /dev/full``, a
    closed descriptor)."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``prog: error: ...; see prog --help``,
    and whose ``--help`` goes through :func:`emit` (argparse drops a failed write silently)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")

    def print_help(self, file: IO[str] | None = None) -> None:
        if file is None or file is sys.stdout:
            emit(self.format_help().rstrip("\n"))
        else:
            super().print_help(file)


def emit(text: str) -> None:
    """Print ``text`` to stdout; once the reader has gone, drop this and all later output.

    A closed pipe is not an error of the command (``deepgemm-compat plan | head -3`` got what it
    asked for): no traceback, and the exit status stays the command's own. Any other failed write
    (a full disk) loses output the caller expected, so it raises :class:`OutputError`, for one
    line on stderr. Either way output goes to /dev/null from then on, so the flush at exit cannot
    fail too.
    """
    if sys.stdout is None:  # started with fd 1 closed (``>&-``): print would drop the text
        raise OutputError(
            "stdout is closed, so there is nowhere to write the output; fix: run it without "
            "'>&-', or send the output to a file or a pipe"
        )
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _drop_stdout()
    except OSError as exc:
        _drop_stdout()
        reason = exc.strerror or type(exc).__name__
        raise OutputError(
            f"cannot write the output to stdout ({reason}), so it is incomplete; fix: send it to "
            f"a file on a disk with space, or to a pipe"
        ) from None


def _drop_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a fd
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, like stdout
    finally:
        os.close(devnull)
