"""The plugin's contract with each SGLang release it accepts (``sglang_cpkv.plugin._releases``).

Runs in every test run against the locked sglang, and in CI's range step
(``scripts/sglang-range``) against each other accepted release, whose wheel is put first on
``PYTHONPATH`` (``CPKV_EXPECT_SGLANG`` names it). With ``test_plugin_sglang.py`` (every hook
target resolves and is wrapped, through ``load_plugins()``), ``test_hooks_resolution.py``
(argument resolution with the plugin active) and ``test_plugin_version_guard.py`` it makes the
contract suite of that step. Here: the shared-KV hooks' targets exist exactly from
``SHARED_KV_FIRST`` on, and before it ``cpkv-serve --cpkv-shared-kv`` is refused in one line,
before SGLang is imported, naming the release that first has the sharded pool; at attention CP
size 1 (one GPU) the line says so first, on every release. The debug fault's targets
(``FAULT_SPECS``, the GPU suite's served-path fault) have their parameters on every release.
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
from sglang_cpkv.plugin.table import FAULT_SPECS, SHARED_KV_SPECS, SPECS

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


FAULTS = tuple(s for specs in FAULT_SPECS.values() for s in specs)


@pytest.mark.parametrize("spec", (*SPECS, *SHARED_KV_SPECS, *FAULTS), ids=lambda s: s.name)
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
    _stand_in_release(tmp_path, monkeypatch, "0.5.21")
    run = guarded_run(SHARED_KV_ARGV, tmp_path / "guard", cwd=tmp_path, block=("sglang",))
    assert run.code == 2 and run.err.count("\n") == 1, run
    assert "first in sglang 0.5.22; the installed sglang is 0.5.21" in run.err


#: One GPU: ``--cpkv-shared-kv`` without prefill CP, and with it at attention CP size 1.
CP1_ARGV = ["--model-path", str(env.GLM51_DIR), "--cpkv-shared-kv"]
CP1_ARGV_CP = [*CP1_ARGV, "--enable-prefill-cp", "--attn-cp-size", "1"]
_ONE_RANK = "it shards the KV pool over the attention-CP ranks, and this deployment has "
_CP_FIX = "run prefill CP over several GPUs (--tp N --enable-prefill-cp --attn-cp-size N, N > 1)"


def _cp1_line(version: str, has: str) -> str:
    """The one line for ``--cpkv-shared-kv`` at attention CP size 1 on sglang ``version``."""
    if release(version) >= release(SHARED_KV_FIRST):
        return (
            f"cpkv-serve: error: --cpkv-shared-kv {_ONE_RANK.removeprefix('it ')}{has}: one rank "
            f"would hold the whole pool, so there is nothing to share. Fix: drop "
            f"--cpkv-shared-kv, or {_CP_FIX}\n"
        )
    return (
        f"cpkv-serve: error: --cpkv-shared-kv cannot run here, for two reasons: (1) {_ONE_RANK}"
        f"{has}; (2) it needs SGLang's sharded KV pool ({SHARED_KV_NEEDS[0]}), first in sglang "
        f"{SHARED_KV_FIRST}; the installed sglang is {version}. Fix: drop --cpkv-shared-kv; to "
        f"use it, {_CP_FIX} on sglang>={SHARED_KV_FIRST},<={TESTED[-1]}\n"
    )


def _stand_in_release(tmp_path: Path, monkeypatch, version: str) -> None:
    site = tmp_path / "site" / f"sglang-{version}.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    monkeypatch.setenv("PYTHONPATH", str(site.parent))


@pytest.mark.parametrize(
    ("argv", "has"),
    [
        (CP1_ARGV, "prefill CP off (no --enable-prefill-cp)"),
        (CP1_ARGV_CP, "attention CP size 1 (--attn-cp-size 1 on --tp-size 1)"),
    ],
)
@pytest.mark.parametrize("version", sorted({INSTALLED, "0.5.20"}))
def test_shared_kv_at_cp_1_is_refused_before_sglang_saying_so(
    tmp_path: Path, monkeypatch, version, argv, has
):
    """Serving on one GPU: refused in one line before SGLang's import (so before any weight),
    naming attention CP size 1 first; on a release without the pool, both reasons. 0.5.20 is a
    stand-in distribution record first on ``PYTHONPATH`` (CI's range step runs the real one)."""
    if version != INSTALLED:
        _stand_in_release(tmp_path, monkeypatch, version)
    run = guarded_run(argv, tmp_path / "guard", cwd=tmp_path, block=("sglang",))
    assert run.code == 2 and run.out == "", run
    assert run.err == _cp1_line(version, has)


def test_the_dry_run_reports_on_this_release(capsys):
    """``cpkv-serve --dry-run`` resolves and reports on each release (0.5.20 has no
    ``attn_dp_size`` field: the report takes SGLang's rule, dp size under DP attention)."""
    from sglang_cpkv.serve.cli import main

    assert main([*env.glm51_argv(), "--dry-run", "--gpu", "sm90"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f"sglang {INSTALLED}")
    parallel = out[out.index("Parallelism") + 1]
    assert parallel.startswith("  tp 8, attention dp 1, attention cp 1 (prefill CP off)")


@pytest.mark.parametrize("gpu", ["sm90", "sm100"])
def test_the_dry_run_runs_this_releases_check_server_args(capsys, gpu):
    """The dry run calls the release's own ``ServerArgs.check_server_args()`` after resolving,
    as its launcher does: a chunk of 100 tokens with DSA's 64-token pages, which resolution
    alone accepts (the dry run printed a report), is refused there on every release."""
    from sglang_cpkv.serve.cli import main

    argv = env.glm51_argv("--chunked-prefill-size", "100", "--dry-run", "--gpu", gpu)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == (
        "cpkv-serve --dry-run: SGLang refused these arguments: AssertionError: "
        "chunked_prefill_size must be divisible by page_size"
    )
