"""The plugin in SGLang's started processes: each says once which hooks took (and records it on
request), and every planted failure stops start-up with one line that names its cause.

One driver process (``_plugin_process_driver.py``) imports SGLang once and forks a fresh process
per scenario: SGLang's own scheduler entry point, ``activate()`` in a main process, and
``cpkv-serve`` (its ``main``) with a hook failure, an exception inside ``load()``, a hook target
whose module fails to import, and the debug fault with and without its acknowledgement. The
stand-ins (the scheduler stops after ``load_plugins()``, SGLang's server is not started) replace
only what needs a GPU; the driver's docstring lists them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import _sglang_env
import pytest
from sglang_cpkv.errors import HookDriftError, HookTargetImportError
from sglang_cpkv.plugin._framework import HookSpec, check_target, resolve_target
from sglang_cpkv.plugin._hooks_record import hooks_line
from sglang_cpkv.plugin.table import FAULT_SPECS, SPECS

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS

DRIVER = Path(__file__).parent / "_plugin_process_driver.py"
SGLANG = importlib.metadata.version("sglang")
ALWAYS = [s.name for s in SPECS]
RAGGED = "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata"


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> dict[str, SimpleNamespace]:
    out = tmp_path_factory.mktemp("processes") / "out.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPKV_")}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(out)], env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for name, r in json.loads(out.read_text()).items():
        lines = [x for x in r["err"].splitlines() if x.strip()]
        runs[name] = SimpleNamespace(**r, last=lines[-1] if lines else "", lines=lines)
        print(f"--- {name}: exit {r['code']}\n{r['err'][-2000:]}")
    return runs


def _hooks_lines(run: SimpleNamespace) -> list[str]:
    return [x for x in run.lines if x.startswith("cpkv[hooks]:")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "process"), [("scheduler", "sglang::scheduler_TP0"), ("launcher", "launcher")]
)
def test_each_process_says_once_which_hooks_took(started, case, process):
    r = started[case]
    assert r.code == 0, r.err[-2000:]
    assert _hooks_lines(r) == [hooks_line(r.pid, process, SGLANG, ALWAYS, None)]
    assert r.record_names == [f"hooks-{r.pid}.json"]
    assert r.records == [
        {"pid": r.pid, "process": process, "sglang": SGLANG, "applied": ALWAYS,
         "not_applied": [], "debug_fault": None}
    ]  # fmt: skip


@pytest.mark.slow
def test_a_planted_hook_failure_stops_start_up_naming_the_hook_and_the_cause(started):
    r = started["break"]
    assert r.code == 1
    assert r.last == (
        f"sglang-cpkv stopped SGLang before serving: hook ragged-offsets -> {RAGGED} did not "
        f"take on sglang {SGLANG} (HookRegistry.apply_hooks failed on its target with "
        f"ValueError: Unknown hook type: planted by CPKV_DEBUG_BREAK_HOOK=ragged-offsets; 1 of "
        f"{len(SPECS)} hooks did not) and SGLang would serve its own code there. Fix: unset "
        f"CPKV_DEBUG_BREAK_HOOK (it planted this failure, for testing)."
    )
    assert r.err.count("sglang-cpkv stopped SGLang") == 1
    assert f"Failed to apply hooks to {RAGGED}" in r.err  # SGLang's own log, left as it was
    assert not _hooks_lines(r)
    (record,) = r.records
    assert record["not_applied"] == ["ragged-offsets"]
    assert record["applied"] == [n for n in ALWAYS if n != "ragged-offsets"]


@pytest.mark.slow
def test_an_exception_inside_load_is_named_in_the_one_line(started):
    r = started["load_raises"]
    assert r.code == 1
    assert r.lines == [
        "sglang-cpkv plugin refused to load: its load() failed with TypeError: planted in load() "
        "while adding config-repair, and SGLang would serve without the plugin's hooks. Fix: "
        "reinstall sglang-integration with the workspace's packages, or report this line"
    ]


@pytest.mark.slow
def test_a_target_module_that_fails_to_import_is_named_as_that_import(started):
    r = started["import_error"]
    assert r.code == 1
    assert r.lines == [
        "sglang-cpkv plugin refused to load: hook target sglang.srt.utils.hf_transformers.config."
        "HfModelConfigParser.parse could not be checked: importing "
        "sglang.srt.utils.hf_transformers.config failed with ModuleNotFoundError: No module named "
        "'cffi'. Fix: install the missing module 'cffi' (SGLang imports it there), e.g. reinstall "
        "sglang with its dependencies."
    ]


@pytest.mark.slow
def test_the_acknowledged_fault_is_on_and_says_so(started):
    r = started["fault"]
    assert r.code == 0, r.err[-2000:]
    faults = [s.name for s in FAULT_SPECS["swap-kv-pages"]]
    assert _hooks_lines(r) == [
        hooks_line(r.pid, "launcher", SGLANG, [*ALWAYS, *faults], "swap-kv-pages")
    ]
    assert r.records[0]["applied"] == [*ALWAYS, *faults]
    out = r.out.splitlines()
    assert out[1] == f"  cpkv hooks: {', '.join(ALWAYS)}"  # the fixes, and only them
    assert out[2].startswith(
        "  DEBUG FAULT swap-kv-pages ON (CPKV_DEBUG_FAULT, acknowledged), hooks "
        "fault-swap-kv-pages, fault-swap-kv-pages-graph: in every batch of two or more requests"
    )
    assert out[2].endswith("Answers are wrong on purpose.")


@pytest.mark.slow
def test_the_unacknowledged_fault_stops_any_sglang_process(started):
    r = started["fault_unacked"]
    assert r.code == 1
    assert r.last.startswith(
        "sglang-cpkv plugin refused to load: CPKV_DEBUG_FAULT=swap-kv-pages plants a fault that "
        "serves wrong answers on purpose"
    )
    assert r.last.endswith("CPKV_DEBUG_FAULT_ACK=i-want-wrong-output. Fix: unset CPKV_DEBUG_FAULT.")
    assert not r.records


# resolve_target on a stand-in package: a module that is absent vs one that fails to import -----


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "cpkvfake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fine.py").write_text("class Parser:\n    def parse(self, model): ...\n")
    (pkg / "needs_cffi.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'cffi'\", name='cffi')\n"
    )
    (pkg / "bad_name.py").write_text("from cpkvfake.fine import Parsr\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cpkvfake"
    for name in [m for m in sys.modules if m.startswith("cpkvfake")]:
        del sys.modules[name]


def test_a_missing_module_or_name_does_not_exist(fake_package):
    assert resolve_target("cpkvfake.fine.Parser.parse")[1] == "parse"
    for target in ("cpkvfake.gone.Parser.parse", "cpkvfake.fine.Parsr.parse",
                   "cpkvfake.fine.Parser.pars", "cpkvfake.fine.sub.Parser.parse"):  # fmt: skip
        with pytest.raises(HookDriftError, match=f"hook target {target} does not exist"):
            resolve_target(target)


def test_a_module_that_fails_to_import_is_that_import_error(fake_package):
    with pytest.raises(HookTargetImportError) as err:
        resolve_target("cpkvfake.needs_cffi.Parser.parse")
    assert str(err.value) == (
        "hook target cpkvfake.needs_cffi.Parser.parse could not be checked: importing "
        "cpkvfake.needs_cffi failed with ModuleNotFoundError: No module named 'cffi'. Fix: install "
        "the missing module 'cffi' (SGLang imports it there), e.g. reinstall sglang with its "
        "dependencies."
    )
    spec = HookSpec("x", "cpkvfake.bad_name.Parser.parse", "around", ("self", "model"), print, "")
    with pytest.raises(HookTargetImportError, match=r"importing cpkvfake.bad_name failed with "
                       r"ImportError: cannot import name 'Parsr'"):  # fmt: skip
        check_target(spec)


def test_why_load_plugins_did_not_run_us(monkeypatch):
    """``activate()``'s line when SGLang ran without the plugin: its whitelist, or our entry
    point failing to import (SGLang logs and skips it), named with the import's error."""
    import importlib.metadata

    from sglang_cpkv.plugin.entry import _why_not_run

    monkeypatch.setenv("SGLANG_PLUGINS", "someone_else")
    assert _why_not_run() == ("Fix: SGLANG_PLUGINS='someone_else' does not include 'cpkv'; add it")
    monkeypatch.delenv("SGLANG_PLUGINS")
    stale = importlib.metadata.EntryPoint("cpkv", "sglang_cpkv.gone:load", "sglang.srt.plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [stale])
    assert _why_not_run() == (
        "Its entry point sglang_cpkv.gone:load failed to import with ModuleNotFoundError: No "
        "module named 'sglang_cpkv.gone' (SGLang logged and skipped it). Fix: reinstall "
        "sglang-integration"
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert _why_not_run().startswith("Fix: install sglang-integration so its")
