"""Launch the reference engine on ``--cp N`` processes with a real ``torch.distributed`` group.

``torch.multiprocessing`` starts N ranks; they rendezvous over TCP on a free loopback port and
form a gloo group (CPU) or an NCCL group (CUDA, one GPU per rank). Every rank runs the same
scenarios; rank 0 draws the progress bar and writes the results to a file the parent reads.

A rank whose run the runtime refuses (``LayoutError``: a memory budget such as
``CPKV_CP_SPLIT_MAX_BYTES=1`` too small for a scenario) leaves the refusal in a file beside the
results; the parent raises it as one :class:`~cpkv_cli.InputError` line (exit 2), not the rank's
traceback and exit 1, which is cpkv-validate's contamination code.

CPU ranks are forked: they inherit the parent's imports (``import torch`` alone costs a spawned
rank ~3.5 s of CPU, more than the tiny model's whole default run), and each sets one intra-op
thread before any tensor work, as forked data-loader workers do. CUDA ranks are spawned (CUDA
cannot be initialised again in a forked child).
"""

from __future__ import annotations

import glob
import logging
import os
import pickle
import signal
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from cpkv_cli import InputError
from cpkv_runtime import LayoutError
from torch.multiprocessing.spawn import ProcessException

from ._compare import ScenarioResult
from ._rt import DistComm
from ._runner import Options, run_all

__all__ = ["free_port", "run_reference", "run_reference_many"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the rendezvous binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _threads(opts: Options) -> None:
    # The tiny model's matmuls gain nothing from intra-op threads; on a busy 2-core box extra
    # threads only spin-wait (measured 10x slower). One thread per rank.
    if opts.device == "cpu":
        torch.set_num_threads(1)


def _worker(
    rank: int, runs: list[Options], port: int, path: str, show: bool, count: tuple[int, int]
) -> None:
    # Ctrl-C reaches the whole process group; the parent alone answers it (ends the ranks, one
    # line), so a rank must not print a KeyboardInterrupt traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    opts = runs[0]
    _threads(opts)
    cuda = opts.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=opts.cp,
        **({"device_id": torch.device("cuda", torch.cuda.current_device())} if cuda else {}),
    )
    try:
        progress = _Progress(runs, count) if (rank == 0 and show) else None
        comm = DistComm()
        try:
            results = [run_all(o, comm, progress, progress and progress.result) for o in runs]
        except LayoutError as exc:  # the parent reports it in one line (module docstring)
            with open(f"{path}.refused.{rank}", "w") as f:
                f.write(str(exc))
            raise
        finally:
            if progress:
                progress.close()
        if rank == 0:
            with open(path, "wb") as f:
                pickle.dump(results, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _Progress:
    """Progress on stderr, drawn by rank 0: a rich bar over (scenario, phase) ticks on a
    terminal; in a pipe or a log (where a bar is noise) a line per finished scenario run.

    Args:
        count: (scenario runs finished before these, scenario runs in the whole command).
    """

    def __init__(self, runs: list[Options], count: tuple[int, int] | None = None) -> None:
        import sys

        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        n = sum(len(o.scenarios) for o in runs)
        self.done, self.total = count or (0, n)
        self.stream = sys.stderr
        console = Console(stderr=True)  # stdout carries the report (and may be a pipe)
        self.lines = not console.is_terminal
        self.bar = Progress(
            TextColumn("[bold]cpkv-validate"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            transient=True,
            console=console,
            disable=self.lines,
        )
        self.bar.start()
        self.task = self.bar.add_task("starting", total=2 * n)

    def __call__(self, what: str, advance: int = 0) -> None:
        self.bar.update(self.task, advance=advance, description=what)

    def result(self, sc: ScenarioResult) -> None:
        """One line for a finished scenario run, when there is no bar."""
        self.done += 1
        if not self.lines:
            return
        verdict = "PASS" if sc.ok else "FAIL"
        rows = sum(r.rows for r in sc.requests)
        print(
            f"cpkv-validate: {self.done}/{self.total} {verdict} {sc.name} (cp {sc.cp}, "
            f"{sc.split}, {sc.allocator}): {len(sc.requests)} requests, {rows} rows",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        self.bar.stop()


def _no_termination_notice(record: logging.LogRecord) -> bool:
    """Drop torch's "Terminating process N via signal SIGTERM": when one rank fails, ending the
    others is the parent's own doing, and a refusal must stay one line."""
    return not record.getMessage().startswith("Terminating process")


def run_reference(opts: Options, show_progress: bool = True) -> list[ScenarioResult]:
    """Run ``opts`` on ``opts.cp`` ranks (in-process for cp 1) and return rank 0's results."""
    return run_reference_many([opts], show_progress)[0]


def run_reference_many(
    runs: list[Options], show_progress: bool = False, count: tuple[int, int] | None = None
) -> list[list[ScenarioResult]]:
    """Several runs with the same ``cp`` and ``device`` in one process group (one spawn).

    Args:
        count: for the progress lines, (scenario runs finished before these, in all); default
            these runs alone.
    """
    count = count or (0, sum(len(o.scenarios) for o in runs))
    if len({(o.cp, o.device) for o in runs}) != 1:
        raise ValueError("run_reference_many: every run must have the same cp and device")
    opts = runs[0]
    if opts.cp == 1:
        threads = torch.get_num_threads()
        _threads(opts)
        progress = _Progress(runs, count) if show_progress else None
        try:
            return [run_all(o, None, progress, progress and progress.result) for o in runs]
        except LayoutError as exc:
            raise InputError(str(exc)) from None
        finally:
            torch.set_num_threads(threads)
            if progress:
                progress.close()
    with tempfile.TemporaryDirectory(prefix="cpkv-validate-") as d:
        path = os.path.join(d, "results.pkl")
        # A Ctrl-C while the ranks start waits until they can all be ended: delivered between two
        # forks, it would leave a started rank waiting for its missing peer in the process group
        # (and the parent waiting for that rank at exit). The ranks inherit the mask and ignore
        # the signal anyway (the parent answers it).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            ctx = mp.start_processes(
                _worker,
                args=(runs, free_port(), path, show_progress, count),
                nprocs=opts.cp,
                join=False,
                start_method="spawn" if opts.device == "cuda" else "fork",
            )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise
        spawn_log = logging.getLogger("torch.multiprocessing.spawn")
        spawn_log.addFilter(_no_termination_notice)
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending Ctrl-C lands here
            while not ctx.join():
                pass
        except ProcessException:
            refused = sorted(glob.glob(f"{glob.escape(path)}.refused.*"))
            if not refused:
                raise
            with open(refused[0]) as f:
                raise InputError(f.read()) from None
        except KeyboardInterrupt:  # end every rank before the caller reports the interrupt
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.terminate()
            for proc in ctx.processes:
                proc.join()
            raise
        finally:
            spawn_log.removeFilter(_no_termination_notice)
        with open(path, "rb") as f:
            return pickle.load(f)
