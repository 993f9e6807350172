"""The plugin's contract with each SGLang release it accepts (``sglang_cpkv.plugin._releases``).

Runs in every test run against the locked sglang, and in CI's range step
(``scripts/sglang-range``) against each other accepted release, whose wheel is put first on
``PYTHONPATH`` (``CPKV_EXPECT_SGLANG`` names it). With ``test_plugin_sglang.py`` (every hook
target resolves and is wrapped, through ``load_plugins()``), ``test_hooks_resolution.py``
(argument resolution with the plugin active) and ``test_plugin_version_guard.py`` it makes the
contract suite of that step. Here: the shared-KV hooks' targets exist exactly from
``SHARED_KV_FIRST`` on, and before it ``cpkv-serve --cpkv-shared-kv`` is refused in one line,
before SGLang is imported, naming the release that first has the sharded pool.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import _sglang_env as env
import pytest
from _serve_guard import GUARD_EXIT, guarded_run
from sglang_cpkv.errors import HookDriftError
from sglang_cpkv.plugin._framework import check_target, resolve_target
from sglang_cpkv.plugin._releases import SHARED_KV_FIRST, SHARED_KV_NEEDS, TESTED, release
from sglang_cpkv.plugin.table import SHARED_KV_SPECS, SPECS

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

INSTALLED = importlib.metadata.version("sglang")
HAS_SHARED_KV = release(INSTALLED) >= release(SHARED_KV_FIRST)
SHARED_KV_ARGV = [
    "--model-path", str(env.GLM51_DIR), "--tp", "8", "--enable-prefill-cp", "--attn-cp-size", "8",
    "--cp-strategy", "interleave", "--cpkv-shared-kv", "--dry-run", "--gpu", "sm100",
]  # fmt: skip


def test_the_installed_release_is_one_the_plugin_accepts():
    assert INSTALLED in TESTED


@pytest.mark.parametrize("spec", SHARED_KV_SPECS, ids=lambda s: s.name)
def test_shared_kv_targets_exist_from_the_first_release_that_has_them(spec):
    if HAS_SHARED_KV:
        check_target(spec)  # resolves, with the parameters the hook wraps
    elif spec.target.startswith(tuple(SHARED_KV_NEEDS)):
        with pytest.raises(HookDriftError, match="does not exist in the installed sglang"):
            check_target(spec)


@pytest.mark.parametrize("spec", (*SPECS, *SHARED_KV_SPECS), ids=lambda s: s.name)
def test_each_hook_checks_on_every_release_the_table_names(spec):
    """The hook table's "checked on" column (``HookSpec.checked``) holds on this release."""
    if INSTALLED not in spec.checked:
        pytest.skip(f"the table does not claim sglang {INSTALLED} for {spec.name}")
    check_target(spec)


@pytest.mark.parametrize("target", SHARED_KV_NEEDS)
def test_what_the_sharded_pool_needs(target):
    if HAS_SHARED_KV:
        resolve_target(target)
    else:
        with pytest.raises(HookDriftError):
            resolve_target(target)


def test_cpkv_serve_shared_kv_on_this_release(tmp_path: Path):
    """Refused before SGLang's import on a release without the pool; else it gets that far."""
    run = guarded_run(SHARED_KV_ARGV, tmp_path / "guard", cwd=tmp_path, block=("sglang",))
    if HAS_SHARED_KV:
        assert run.code == GUARD_EXIT, run  # past every check, into SGLang's import
        return
    assert run.code == 2 and run.out == "", run
    assert run.err == (
        f"cpkv-serve: error: --cpkv-shared-kv needs SGLang's sharded KV pool "
        f"({SHARED_KV_NEEDS[0]}), first in sglang {SHARED_KV_FIRST}; the installed sglang is "
        f"{INSTALLED}. Fix: pip install 'sglang>={SHARED_KV_FIRST},<={TESTED[-1]}', or drop "
        f"--cpkv-shared-kv\n"
    )


def test_shared_kv_refused_on_a_stand_in_0_5_21(tmp_path: Path, monkeypatch):
    """The same refusal in every run: a 0.5.21 distribution record first on ``PYTHONPATH``."""
    site = tmp_path / "site" / "sglang-0.5.21.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.21\n")
    monkeypatch.setenv("PYTHONPATH", str(site.parent))
    run = guarded_run(SHARED_KV_ARGV, tmp_path / "guard", cwd=tmp_path, block=("sglang",))
    assert run.code == 2 and run.err.count("\n") == 1, run
    assert "first in sglang 0.5.22; the installed sglang is 0.5.21" in run.err
