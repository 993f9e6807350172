"""The http engine's concurrent batch, and the evidence that its requests overlapped.

``--concurrency`` threads each send one request at a time; the first wave waits at a barrier
and starts together. Each request's interval runs from just before its connect to its last
byte, on this process's monotonic clock; the largest number of intervals that share an instant
is the most requests that were in flight at once, as the client saw them (a server may still
queue what it received). Below 2 the run was no batch test, whatever ``--concurrency`` said:
``--concurrency 1`` passed a server whose bug needs two requests at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, CancelledError, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["max_in_flight", "run_concurrently"]

T = TypeVar("T")


def max_in_flight(intervals: Sequence[tuple[float, float]]) -> int:
    """The most ``(start, end)`` intervals that contain one instant (ends are exclusive: a
    request that ended as another started did not overlap it)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in events:  # at equal times the end (-1) sorts first
        now += step
        most = max(most, now)
    return most


def run_concurrently(
    jobs: Sequence[Callable[[], T]], concurrency: int, wait_s: float
) -> tuple[list[T], list[tuple[float, float]]]:
    """Run ``jobs`` on ``concurrency`` threads; their results and (start, end) intervals.

    Args:
        wait_s: how long the first wave waits at its barrier for all its threads to start (a
            thread that never starts must not hold the others for ever).

    Raises:
        The first exception a job raised; jobs not yet started are cancelled.
    """
    wave = threading.Barrier(min(concurrency, len(jobs)))
    stopped = threading.Event()  # a failure or Ctrl-C: a thread released by it starts nothing
    intervals: list[tuple[float, float]] = [(0.0, 0.0)] * len(jobs)

    def timed(i: int) -> T:
        if i < wave.parties:  # broken (a thread never came): start anyway, the intervals tell
            with contextlib.suppress(threading.BrokenBarrierError):
                wave.wait(wait_s)
        if stopped.is_set():
            raise CancelledError
        start = time.monotonic()
        out = jobs[i]()
        intervals[i] = (start, time.monotonic())
        return out

    pool = ThreadPoolExecutor(max_workers=concurrency)
    futures = [pool.submit(timed, i) for i in range(len(jobs))]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception()), None)
        if failed is not None:
            raise failed.exception()  # type: ignore[misc]
    except BaseException:  # a failed request, Ctrl-C: start nothing more, wait for nothing
        stopped.set()
        wave.abort()
        pool.shutdown(wait=False, cancel_futures=True)  # requests in flight end by --timeout
        raise
    pool.shutdown()
    return [f.result() for f in futures], intervals
