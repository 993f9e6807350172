"""Which hooks took effect in this process, said once in the server log (and, on request, a file).

After SGLang's ``apply_hooks`` and the plugin's applied-check (``plugin._applied``), every process
that loaded the plugin prints one line to its stderr, which SGLang's processes share with the
server log::

    cpkv[hooks]: pid=1234 process=sglang::scheduler_TP0 sglang=0.5.20 applied=config-repair,...

(`` debug_fault=swap-kv-pages`` is appended while a debug fault is on). A print, not the
``sglang_cpkv`` logger: a scheduler loads plugins before SGLang configures its logging, where an
INFO record would go nowhere. The line is printed again only if the applied set changes (a later
load adds hooks). With ``CPKV_HOOKS_RECORD_DIR`` set, each check also writes
``<dir>/hooks-<pid>.json`` = ``{"pid", "process", "sglang", "applied", "not_applied",
"debug_fault"}`` (written before a refusal too), so a test reads what each process of a live
server applied without HTTP.

The process is named from what is cheap and already there: SGLang's process title when it is
set (``sglang::detokenizer`` sets it before loading plugins), else the SGLang function that
called ``load_plugins()`` (a scheduler loads plugins first thing in ``run_scheduler_process``,
whose ranks give ``sglang::scheduler_TP0`` as SGLang's own title will read at TP > 1), else
``launcher`` for the main process, else the multiprocessing name.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cpkv_cli.environment import CPKV_HOOKS_RECORD_DIR

__all__ = ["RECORD_ENV", "hooks_line", "process_name", "report"]

RECORD_ENV = "CPKV_HOOKS_RECORD_DIR"
_SCHEDULER = ("sglang.srt.managers.scheduler", "run_scheduler_process")
_last_line: str | None = None


def process_name() -> str:
    """This process's role, one token (module docstring); never raises."""
    try:
        return _process_name()
    except Exception:  # a name is worth less than the line
        return "unknown"


def _process_name() -> str:
    try:
        from setproctitle import getproctitle  # SGLang's dependency; it sets the titles

        title = getproctitle()
    except ImportError:
        title = ""
    if title.startswith("sglang::"):
        return "".join(title.split())
    frame = sys._getframe(1)
    while frame is not None:
        where = (frame.f_globals.get("__name__"), frame.f_code.co_name)
        if where == _SCHEDULER:
            return _scheduler_name(frame.f_locals)
        frame = frame.f_back
    if multiprocessing.parent_process() is None:
        return "launcher"
    return "".join(multiprocessing.current_process().name.split()) or "unknown"


def _scheduler_name(ranks: dict[str, Any]) -> str:
    """``sglang::scheduler`` with the ranks SGLang's title puts after it (DP, PP, TP)."""
    dp = ranks.get("display_dp_rank", ranks.get("dp_rank"))
    tp = ranks.get("display_tp_rank")
    tp = ranks.get("tp_rank") if tp is None else tp
    name = "sglang::scheduler"
    if dp is not None:
        name += f"_DP{dp}"
    if ranks.get("pp_rank"):
        name += f"_PP{ranks['pp_rank']}"
    return name + (f"_TP{tp}" if tp is not None else "")


def hooks_line(
    pid: int, process: str, sglang: str | None, applied: Sequence[str], fault: str | None
) -> str:
    """The one line (module docstring)."""
    line = (
        f"cpkv[hooks]: pid={pid} process={process} sglang={sglang} "
        f"applied={','.join(applied) or 'none'}"
    )
    return line + (f" debug_fault={fault}" if fault else "")


def report(
    sglang: str | None,
    applied: Sequence[str],
    not_applied: Sequence[str],
    fault: str | None,
) -> None:
    """Write the record file (when asked for) and, when every hook took, print the line."""
    pid, process = os.getpid(), process_name()
    try:
        directory = CPKV_HOOKS_RECORD_DIR.read()
    except ValueError as err:  # a debug aid: say so, and let the process serve
        print(f"cpkv[hooks]: pid={pid} writes no record: {err}", file=sys.stderr, flush=True)
        directory = None
    if directory is not None:
        record = {
            "pid": pid, "process": process, "sglang": sglang, "applied": list(applied),
            "not_applied": list(not_applied), "debug_fault": fault,
        }  # fmt: skip
        _write(directory, pid, record)
    if not_applied:
        return  # the refusal that follows is this process's line
    global _last_line
    line = hooks_line(pid, process, sglang, applied, fault)
    if line != _last_line:
        _last_line = line
        print(line, file=sys.stderr, flush=True)


def _write(directory: Path, pid: int, record: dict[str, Any]) -> None:
    """``directory/hooks-<pid>.json``, replaced whole (a reader never sees half a file)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".hooks-{pid}-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, directory / f"hooks-{pid}.json")
    except OSError as err:  # a debug aid: say so, and let the process serve
        print(
            f"cpkv[hooks]: pid={pid} could not write {RECORD_ENV}={directory}: {err}",
            file=sys.stderr,
            flush=True,
        )
