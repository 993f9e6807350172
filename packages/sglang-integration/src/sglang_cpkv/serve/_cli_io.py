"""What ``cpkv-serve`` needs from its surroundings, made safe against hostile input.

- :class:`OneLineParser`: a usage error is one line on stderr and exit status 2 (argparse's own
  prints the whole usage first).
- :class:`BadInput` and :func:`refuse`: any other bad input, the same one line and status 2.
- :func:`quiet_on_closed_stdout`: a reader that closes stdout early (``| head -1``) ends the
  output quietly, with no traceback and no "Exception ignored" at exit.
- :func:`sglang_import_warnings_filtered`: SGLang's import-time warnings about a machine without
  CUDA, silenced inside our entry point only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import NoReturn

PROG = "cpkv-serve"

#: SGLang 0.5.23's quantization modules warn at import on a machine without CUDA/HIP/XPU/NPU
#: (``awq/awq.py``: "Only CUDA, HIP and XPU support AWQ currently.", ``gguf.py``: "Only CUDA,
#: MUSA and NPU support GGUF quantization currently."): every dry run on a laptop. A GPU host
#: never sees them.
SGLANG_NO_CUDA_WARNINGS = (
    (r"Only CUDA, .* support (AWQ|GGUF)", r"sglang\.srt\.layers\.quantization\."),
)


class BadInput(ValueError):
    """A bad argument, environment variable or model file: one line naming it and the fix."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``prog: error: ...; see ...``."""

    def error(self, message: str) -> NoReturn:
        text = one_line(message).rstrip(".")
        self.exit(2, f"{self.prog}: error: {text}; see '{self.prog} --cpkv-help'\n")


def refuse(err: BadInput | str) -> int:
    """Print ``cpkv-serve: error: <err>`` as one line on stderr; return exit status 2."""
    text = " ".join(str(err).split())  # one line, whatever the message held
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 2


def printable(text: str, limit: int = 200) -> str:
    """``text`` as typed when it is printable and short, else its ``repr`` (cut), for messages."""
    if text.isprintable() and len(text) <= limit:
        return text
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 40]}... ({len(text)} characters)"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(text.split())


def quiet_on_closed_stdout(run: Callable[[], int]) -> int:
    """``run()``, then flush stdout; if the reader closed stdout, return 0 quietly.

    A closed pipe is not an error of the command (``cpkv-serve --help | head -1`` got what it
    asked for). The flush inside (also when ``run`` exits through ``SystemExit``, as argparse's
    ``--cpkv-help`` does) surfaces a closed stdout here rather than at interpreter exit. A
    ``BrokenPipeError`` is taken for a closed stdout only when stdout's descriptor reports its
    reader gone; one from anything else (a socket of the server) propagates. Output goes to
    /dev/null from then on, so the flush at interpreter exit does not fail either.
    """
    try:
        try:
            return run()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        _stdout_to_devnull()
        return 0


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has closed it (``poll`` reports it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor (replaced stdout)
        return False


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a fd
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, like stdout
    finally:
        os.close(devnull)


@contextlib.contextmanager
def sglang_import_warnings_filtered() -> Iterator[None]:
    """Inside the block, ignore :data:`SGLANG_NO_CUDA_WARNINGS`; the filters are restored after.

    Scoped by message and by the warning module, so nothing else is hidden, and only here: a
    program importing SGLang itself still sees them.
    """
    with warnings.catch_warnings():
        for message, module in SGLANG_NO_CUDA_WARNINGS:
            warnings.filterwarnings("ignore", message, UserWarning, module)
        yield
