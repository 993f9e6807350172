#!/usr/bin/env python3
"""Sample what a served GPU box is doing while the serve suite waits on it.

A request that never answers leaves nothing in the server's log. This samples, every
``--every`` seconds until it is stopped (SIGTERM) or ``--for`` runs out:

- ``processes.log``: the processes that used the most CPU since the last sample (CPU %, resident
  and virtual size, command line), and the GPU's utilisation and memory from ``nvidia-smi``;
- ``stacks.log``: every ``--stacks-every`` seconds, ``py-spy dump`` of each Python process whose
  command line holds one of ``--match`` (SGLang names its processes ``sglang::scheduler_TP0``
  and so on), where a py-spy binary is given: the Python stack a stalled scheduler sits in.

Only /proc and the two tools are read; nothing is sent to the processes but py-spy's brief pause.
Usage: ``watch.py OUTDIR [--every 20] [--stacks-every 60] [--py-spy PATH] [--match sglang ...]``.
Exit 0 when stopped; 2 with one line when OUTDIR cannot be written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_ticks() -> dict[int, int]:
    """utime + stime of every process now, in clock ticks (fields 14 and 15 of /proc/PID/stat)."""
    ticks = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone between the listing and the read
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    return ticks


def describe(pid: int) -> tuple[int, int, str] | None:
    """(resident MiB, virtual MiB, whole command line) of one process, or None once it has gone."""
    try:
        statm = Path(f"/proc/{pid}/statm").read_text().split()
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return None
    return int(statm[1]) * PAGE >> 20, int(statm[0]) * PAGE >> 20, cmd.strip()


def busiest(before: dict[int, int], after: dict[int, int], seconds: float, top: int) -> list[str]:
    """One line per process that used the most CPU between two samples, busiest first."""
    used = sorted(((after[p] - before.get(p, 0), p) for p in after), reverse=True)[:top]
    lines = []
    for ticks, pid in used:
        if ticks <= 0:
            break
        info = describe(pid)
        if info:
            rss, vsz, cmd = info
            share = 100 * ticks / TICKS / seconds
            lines.append(f"{pid:>7} {share:6.1f}% {rss:>7}M {vsz:>8}M  {cmd[:160]}")
    return lines


def gpu_line() -> str:
    if not shutil.which("nvidia-smi"):
        return "gpu: no nvidia-smi"
    res = subprocess.run(
        ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return "gpu: " + (res.stdout.strip().replace("\n", " | ") or res.stderr.strip())


def matching(terms: list[str]) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose command line holds one of the terms, this one
    excluded."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            info = describe(int(entry.name))
            if info and any(t in info[2] for t in terms):
                found.append((int(entry.name), info[2]))
    return sorted(found)


def dump_stacks(py_spy: str, terms: list[str]) -> str:
    parts = []
    for pid, cmd in matching(terms):
        try:
            res = subprocess.run(
                [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20
            )
            text = res.stdout if res.returncode == 0 else res.stdout + res.stderr
        except subprocess.TimeoutExpired:
            text = "py-spy: no answer in 20 s\n"
        parts.append(f"--- pid {pid}: {cmd[:160]}\n{text}")
    return "".join(parts) or "no matching process\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--every", type=float, default=20.0, help="seconds between samples")
    ap.add_argument("--stacks-every", type=float, default=60.0, help="seconds between stack dumps")
    ap.add_argument("--for", dest="duration", type=float, default=None, help="stop after this long")
    ap.add_argument("--py-spy", default=None, help="a py-spy binary; without it, no stacks")
    ap.add_argument("--match", nargs="+", default=["sglang", "cpkv"], help="whose stacks to dump")
    ap.add_argument("--top", type=int, default=12, help="processes per sample")
    args = ap.parse_args(argv)
    try:
        args.outdir.mkdir(parents=True, exist_ok=True)
        procs = open(args.outdir / "processes.log", "a", buffering=1)  # noqa: SIM115 (to the end)
        stacks = open(args.outdir / "stacks.log", "a", buffering=1)  # noqa: SIM115
    except OSError as exc:
        print(f"watch: cannot write {args.outdir}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()  # SIGTERM ends the wait at once, with no sample after it
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    start = last_stacks = time.monotonic()
    before, t_before = cpu_ticks(), start
    if not args.py_spy:
        stacks.write("no py-spy given: no stacks\n")
    while not stop.wait(args.every):
        now = time.monotonic()
        after = cpu_ticks()
        stamp = f"=== {time.strftime('%H:%M:%S')} +{now - start:.0f}s"
        lines = busiest(before, after, now - t_before, args.top)
        procs.write("\n".join([stamp, gpu_line(), *lines]) + "\n")
        before, t_before = after, now
        if args.py_spy and now - last_stacks >= args.stacks_every - 1e-6:
            stacks.write(f"{stamp}\n{dump_stacks(args.py_spy, args.match)}")
            last_stacks = now
        if args.duration is not None and now - start >= args.duration:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
