"""Usage errors on one line, and output that ends quietly when its reader goes away."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``prog: error: ...; see prog --help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def emit(text: str) -> None:
    """Print ``text`` to stdout; once the reader has gone, drop this and all later output.

    A closed pipe is not an error of the command (``deepgemm-compat plan | head -3`` got what it
    asked for): no traceback, and the exit status stays the command's own. Output goes to
    /dev/null from then on, so the flush at exit cannot fail either.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a fd
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, like stdout
        finally:
            os.close(devnull)
