"""Start-up of SGLang processes with the plugin, each after a planted condition; one import.

``python _plugin_process_driver.py OUT.json`` imports SGLang once, then forks one child per
scenario (a fresh plugin state each: this process never loads plugins) and writes, per scenario,
the child's exit status, stdout, stderr and the ``CPKV_HOOKS_RECORD_DIR`` files it wrote:

- ``scheduler``: SGLang's own ``run_scheduler_process`` (its first act is ``load_plugins()``), in
  a multiprocessing child as SGLang starts it. Everything after ``load_plugins()`` needs a GPU, so
  the child stops there: the one stand-in, a ``load_plugins`` in the scheduler module's globals
  that calls SGLang's and then raises.
- ``launcher``: ``activate()`` in a main process (what ``cpkv-serve`` runs before SGLang's).
- ``break``: ``cpkv-serve`` with ``CPKV_DEBUG_BREAK_HOOK=ragged-offsets``.
- ``load_raises``: ``cpkv-serve`` with a ``TypeError`` planted inside the plugin's ``load()``.
- ``import_error``: ``cpkv-serve`` where the config-repair target's module raises
  ``ModuleNotFoundError: No module named 'cffi'`` on import (a stand-in module, as a missing
  dependency of SGLang does).
- ``fault``: ``cpkv-serve --dry-run`` with ``CPKV_DEBUG_FAULT=swap-kv-pages`` acknowledged.
- ``fault_unacked``: ``load_plugins()`` with ``CPKV_DEBUG_FAULT`` and no acknowledgement.

``cpkv-serve`` runs as ``sglang_cpkv.serve.cli.main`` (the console script's body) with SGLang's
``serve`` replaced by a function that raises: starting the server needs a GPU, and a run that
gets there has failed the scenario. A ``SystemExit`` carrying a message is printed and exits 1,
as the interpreter does.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Callable
from pathlib import Path

FIXTURE = str(Path(__file__).parent / "fixtures" / "glm51_fp8")
SERVE = ["--model-path", FIXTURE, "--tp", "1", "--device", "cpu"]
DRY = ["--model-path", FIXTURE, "--tp", "1", "--dry-run", "--gpu", "sm90"]
HF_CONFIG = "sglang.srt.utils.hf_transformers.config"
ACK = {"CPKV_DEBUG_FAULT": "swap-kv-pages", "CPKV_DEBUG_FAULT_ACK": "i-want-wrong-output"}


class WouldServe(RuntimeError):
    """cpkv-serve got past the plugin to SGLang's server."""


class AfterPlugins(Exception):
    """The scheduler finished ``load_plugins()``."""


def _exit_status(fn: Callable[[], object]) -> int:
    try:
        code = fn()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        return 70
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)  # what the interpreter does with SystemExit("message")
        return 1
    return code


def _cpkv_serve(argv: list[str]) -> Callable[[], object]:
    def run() -> object:
        def serve(*_: object) -> None:
            raise WouldServe("cpkv-serve went on to start SGLang's server")

        stand_in = types.ModuleType("sglang.cli.serve")  # the server itself needs a GPU
        stand_in.serve = serve  # type: ignore[attr-defined]
        sys.modules["sglang.cli.serve"] = stand_in
        from sglang_cpkv.serve.cli import main

        return main(argv)

    return run


def _activate() -> object:
    from sglang_cpkv.plugin.entry import activate

    activate()
    return 0


def _load_plugins() -> object:
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return 0


def _plant_type_error() -> None:
    from sglang_cpkv.plugin import _registered

    def add(spec: object, hook: object) -> None:
        raise TypeError(f"planted in load() while adding {getattr(spec, 'name', spec)}")

    _registered.add = add


class _Unimportable(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds HF_CONFIG and fails to execute it, as a module whose dependency is missing."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == HF_CONFIG else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ModuleNotFoundError("No module named 'cffi'", name="cffi")


def _plant_import_error() -> None:
    sys.modules.pop(HF_CONFIG, None)
    parent = sys.modules[HF_CONFIG.rpartition(".")[0]]
    if hasattr(parent, "config"):
        delattr(parent, "config")
    sys.meta_path.insert(0, _Unimportable())


SCENARIOS: dict[str, tuple[dict[str, str], Callable[[], None] | None, Callable[[], object]]] = {
    "launcher": ({}, None, _activate),
    "break": ({"CPKV_DEBUG_BREAK_HOOK": "ragged-offsets"}, None, _cpkv_serve(SERVE)),
    "load_raises": ({}, _plant_type_error, _cpkv_serve(SERVE)),
    "import_error": ({}, _plant_import_error, _cpkv_serve(SERVE)),
    "fault": (ACK, None, _cpkv_serve(DRY)),
    "fault_unacked": ({"CPKV_DEBUG_FAULT": "swap-kv-pages"}, None, _load_plugins),
}


def _capture(folder: Path) -> None:
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)


def _child(
    folder: Path,
    env: dict[str, str],
    plant: Callable[[], None] | None,
    fn: Callable[[], object],
) -> int:
    _capture(folder)
    os.environ.update({**env, "CPKV_HOOKS_RECORD_DIR": str(folder / "records")})
    if plant is not None:
        plant()
    code = _exit_status(fn)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _scheduler(folder: str) -> None:
    """A multiprocessing child running SGLang's scheduler entry up to its plugins."""
    import inspect

    from sglang.srt.managers import scheduler  # sets up SGLang's logging, as in a scheduler

    real = scheduler.load_plugins

    def load_plugins() -> None:
        real()
        raise AfterPlugins

    scheduler.load_plugins = load_plugins
    ranks = {"gpu_id": 0, "tp_rank": 0, "pp_rank": 0, "attn_cp_rank": 0, "moe_dp_rank": 0,
             "moe_ep_rank": 0}  # fmt: skip
    params = inspect.signature(scheduler.run_scheduler_process).parameters
    kwargs = {n: ranks.get(n) for n, p in params.items() if p.default is p.empty}

    def run() -> int:
        try:
            scheduler.run_scheduler_process(**kwargs)
        except AfterPlugins:
            return 0
        raise WouldServe("run_scheduler_process went past load_plugins()")

    code = _child(Path(folder), {}, None, run)
    os._exit(code)


def _result(folder: Path, code: int) -> dict[str, object]:
    records = sorted((folder / "records").glob("hooks-*.json"))
    return {
        "code": code,
        "out": (folder / "stdout").read_text(),
        "err": (folder / "stderr").read_text(),
        "records": [json.loads(p.read_text()) for p in records],
        "record_names": [p.name for p in records],
    }


def main(out: str) -> None:
    # What the children share, imported once: SGLang's plugin machinery and the hook targets,
    # not the modules that set up SGLang's logging (cpkv-serve loads the plugin before those).
    import sglang.srt.plugins  # noqa: F401
    import sglang_cpkv.serve.cli  # noqa: F401
    from sglang_cpkv.plugin._framework import resolve_target
    from sglang_cpkv.plugin.table import SPECS

    for spec in SPECS:
        resolve_target(spec.target)
    assert not logging.getLogger().handlers, "a shared import set up logging"

    work = Path(tempfile.mkdtemp(prefix="cpkv-plugin-processes-"))
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[str, tuple[int, Path]] = {}
    for name, (env, plant, fn) in SCENARIOS.items():
        folder = work / name
        folder.mkdir()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = _child(folder, env, plant, fn)
            finally:
                os._exit(code)
        children[name] = (pid, folder)
    sched = work / "scheduler"
    sched.mkdir()
    proc = multiprocessing.get_context("fork").Process(target=_scheduler, args=(str(sched),))
    proc.start()
    results = {}
    for name, (pid, folder) in children.items():
        _, status = os.waitpid(pid, 0)
        results[name] = _result(folder, os.waitstatus_to_exitcode(status))
    proc.join()
    results["scheduler"] = _result(sched, proc.exitcode)
    results["scheduler"]["pid"] = proc.pid
    for name, (pid, _) in children.items():
        results[name]["pid"] = pid
    shutil.rmtree(work, ignore_errors=True)  # the children's records are read into results
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
