"""Output that ends quietly when stdout's reader is gone (``| head -1``), and nothing else quietly.

A closed pipe is not an error of the command: it got what it asked for. Any other failed write
(a full disk) loses output the caller expected, so it is an :class:`~cpkv_cli.OutputError`. Once
the reader is gone, stdout goes to /dev/null, so the flush at interpreter exit cannot fail too.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Callable, Iterator

from cpkv_cli._messages import OutputError


def emit(text: str, *, end: str = "\n") -> None:
    """Print ``text`` to stdout and flush; once the reader has gone, drop this and all later
    output (the command finishes, with its own exit status).

    Raises:
        OutputError: stdout was closed at start (``>&-``) or a write failed otherwise.
    """
    if sys.stdout is None:  # started with fd 1 closed (``>&-``): print would drop the text
        raise OutputError(
            "stdout is closed, so there is nowhere to write the output; fix: run it without "
            "'>&-', or send the output to a file or a pipe"
        )
    try:
        print(text, end=end, flush=True)
    except BrokenPipeError:
        drop_stdout()
    except OSError as exc:
        drop_stdout()
        raise _write_failed(exc) from None


class QuietStdout:
    """stdout for code that writes through a file object (``out.write(...)``): every write goes
    through :func:`emit`, so a reader that left drops the rest and the command keeps its status."""

    def write(self, text: str) -> int:
        emit(text, end="")
        return len(text)

    def flush(self) -> None:
        """Nothing to do: :func:`emit` flushes every write."""


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Run the block; if the reader of stdout has gone, drop this and all later output. A
    ``BrokenPipeError`` from anything else (a socket) propagates, as in
    :func:`quiet_on_closed_stdout`."""
    try:
        yield
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        drop_stdout()


def quiet_on_closed_stdout(run: Callable[[], int]) -> int:
    """``run()``, then flush stdout; if the reader closed stdout, return 0 quietly.

    The flush inside (also when ``run`` exits through ``SystemExit``, as argparse's ``--help``
    does) surfaces a closed stdout here rather than at interpreter exit. A ``BrokenPipeError`` is
    taken for a closed stdout only when stdout's descriptor reports its reader gone; one from
    anything else (a server's socket) propagates.

    Raises:
        OutputError: that flush failed otherwise (``> /dev/full``): text a plain ``print`` left
            in the buffer is lost. Before, this was a traceback and exit 1 at interpreter exit.
    """
    try:
        try:
            return run()
        finally:
            _flush_stdout()
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        drop_stdout()
        return 0


def _flush_stdout() -> None:
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        drop_stdout()
        raise _write_failed(exc) from None


def _write_failed(exc: OSError) -> OutputError:
    reason = exc.strerror or type(exc).__name__
    return OutputError(
        f"cannot write the output to stdout ({reason}), so it is incomplete; fix: send it to "
        f"a file on a disk with space, or to a pipe"
    )


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has closed it (``poll`` reports it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor (replaced stdout)
        return False


def drop_stdout() -> None:
    """Send the rest of stdout to /dev/null (the descriptor, or the object where there is none)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a fd
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit, like stdout
    finally:
        os.close(devnull)
