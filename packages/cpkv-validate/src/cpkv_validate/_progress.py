"""Progress of the http engine on stderr: a bar on a terminal, else one line per completion.

A rich bar redraws one line on a terminal; in a pipe or a log it is noise, and without it the
command was silent until the table. Each line is written whole, under one lock: at
``--concurrency 16`` lines printed by the batch's threads interleaved (``print`` writes the
text and the newline separately) and their counts repeated.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from ._client import Completion

__all__ = ["Lines", "evidence_text", "progress"]


def evidence_text(run: Completion, unit: bool = False) -> str:
    """``"8 (length)"`` (``"8 tokens (length)"`` with ``unit``): the tokens the reply holds, the
    server's own count beside them where it disagrees (``"1, usage says 32 (length)"``)."""
    n = len(run.tokens)
    what = f" {'tokens' if run.source == 'logprobs' else 'words'}" if unit else ""
    said = f", usage says {run.usage}" if run.usage is not None and run.usage != n else ""
    return f"{n}{what}{said} ({run.finish_reason or 'no finish reason'})"


class Lines:
    """``cpkv-validate: 3/24 batch r2: 32 tokens (length)``, one whole line per call."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done = total, 0
        self.stream = stream
        self.lock = threading.Lock()

    def phase(self, description: str) -> None:
        """Nothing: each line names its phase."""

    def __call__(self, phase: str, name: str, run: Completion) -> None:
        with self.lock:
            self.done += 1
            text = evidence_text(run, unit=True)
            stream = self.stream or sys.stderr
            stream.write(f"cpkv-validate: {self.done}/{self.total} {phase} {name}: {text}\n")
            stream.flush()


class _Bar:
    """A rich bar on stderr; ``phase`` names what runs now."""

    def __init__(self, bar, total: int) -> None:  # type: ignore[no-untyped-def]
        self.bar, self.lock = bar, threading.Lock()
        self.task = bar.add_task("reference (alone)", total=total)

    def phase(self, description: str) -> None:
        self.bar.update(self.task, description=description)

    def __call__(self, phase: str, name: str, run: Completion) -> None:
        with self.lock:
            self.bar.advance(self.task)


class _Quiet:
    def phase(self, description: str) -> None:
        pass

    def __call__(self, phase: str, name: str, run: Completion) -> None:
        pass


@contextlib.contextmanager
def progress(total: int, show: bool) -> Iterator[_Bar | Lines | _Quiet]:
    """A bar when stderr is a terminal, lines when it is not, nothing when not ``show``."""
    if not show:
        yield _Quiet()
        return
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)  # stdout carries the report (and may be a pipe)
    if not console.is_terminal:
        yield Lines(total)
        return
    with Progress(transient=True, console=console) as bar:
        yield _Bar(bar, total)
