"""``--cpkv-shared-kv`` and its dry-run flags: parsed, validated, translated for SGLang; the
plugin's hook table grows by the shared-KV hooks only under ``CPKV_SHARED_KV=1``."""

from __future__ import annotations

import os

import _sglang_env as env
import pytest
from sglang_cpkv.errors import PluginRefused, SharedKVError
from sglang_cpkv.plugin.entry import SHARED_KV_ENV, enabled_specs
from sglang_cpkv.plugin.table import SHARED_KV_SPECS, SPECS
from sglang_cpkv.serve._flags import parse_cpkv_args, with_sharding


def test_shared_kv_flag_and_batch_shape():
    a = parse_cpkv_args(
        ["--tp", "8", "--cpkv-shared-kv", "--dry-run", "--cpkv-scratch-batch", "4x1000+7"]
    )
    assert a.shared_kv and a.scratch_batch == (4, 1000, 7) and a.sglang_argv == ("--tp", "8")
    assert parse_cpkv_args([]).scratch_batch == (8, 65536, 2048)
    assert not parse_cpkv_args([]).shared_kv


@pytest.mark.parametrize("shape", ["8x", "x1+2", "0x10+1", "2x10", "2x-1+3", "2x10+0"])
def test_bad_batch_shape_exits_2(shape, capsys):
    with pytest.raises(SystemExit) as info:
        parse_cpkv_args(["--cpkv-scratch-batch", shape])
    assert info.value.code == 2
    assert "REQUESTSxPREFIX+EXTEND" in capsys.readouterr().err


def test_with_sharding_adds_sglang_flag_once():
    assert with_sharding(["--tp", "8"]) == ["--tp", "8", "--enable-kv-cache-sharding"]
    argv = ["--enable-kv-cache-sharding", "--tp", "8"]
    assert with_sharding(argv) == argv


def test_shared_kv_hooks_only_when_enabled():
    names = [s.name for s in SHARED_KV_SPECS]
    assert names == ["shared-kv-pool", "shared-kv-plan", "shared-kv-pool-check", "shared-kv-gate"]
    assert [s.name for s in enabled_specs(env={})] == [s.name for s in SPECS]
    on = [s.name for s in enabled_specs(env={SHARED_KV_ENV: "1"})]
    assert on == [*(s.name for s in SPECS), *names]
    # without --cpkv-shared-kv a shared-KV name is known and disabling it changes nothing
    assert enabled_specs(env={"CPKV_DISABLE_HOOKS": "shared-kv-gate"}) == enabled_specs(env={})


SHARED_KV_NAMES = ["shared-kv-pool", "shared-kv-plan", "shared-kv-pool-check", "shared-kv-gate"]


@pytest.mark.parametrize(
    "off",
    [*SHARED_KV_NAMES, "shared-kv-pool,shared-kv-pool-check", "deepgemm-warmup,shared-kv-plan"],
)
def test_disabling_a_shared_kv_hook_under_the_flag_is_refused(off):
    """The four shared-KV hooks are one unit: under ``CPKV_SHARED_KV=1`` none may be off."""
    with pytest.raises(SharedKVError) as info:
        enabled_specs(env={SHARED_KV_ENV: "1", "CPKV_DISABLE_HOOKS": off})
    line = str(info.value)
    assert "\n" not in line and "Fix: take" in line
    named = [n for n in SHARED_KV_NAMES if n in off.split(",")]
    assert f"CPKV_DISABLE_HOOKS disables {', '.join(named)}," in line, line


def test_plugin_load_refuses_a_disabled_shared_kv_hook(monkeypatch):
    """SGLang's processes: the plugin's ``load()`` refuses (a ``SystemExit``), registering
    nothing."""
    from sglang_cpkv.plugin import _registered
    from sglang_cpkv.plugin.entry import load

    before = _registered.registered_hooks()
    monkeypatch.setenv(SHARED_KV_ENV, "1")
    monkeypatch.setenv("CPKV_DISABLE_HOOKS", "shared-kv-plan")
    with pytest.raises(PluginRefused, match="disables shared-kv-plan, and SGLang"):
        load()
    assert _registered.registered_hooks() == before


def test_cpkv_serve_refuses_a_disabled_shared_kv_hook(monkeypatch, capsys):
    """cpkv-serve: exit 2 with one line, before SGLang starts (the issue's SM90 case)."""
    from sglang_cpkv.serve.cli import main

    monkeypatch.delenv(SHARED_KV_ENV, raising=False)
    monkeypatch.setenv("CPKV_DISABLE_HOOKS", "shared-kv-pool,shared-kv-pool-check")
    argv = [
        *env.glm51_argv(), "--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy",
        "interleave", "--dsa-prefill-backend", "flashmla_kv", "--kv-cache-dtype", "fp8_e4m3",
        "--cpkv-shared-kv", "--dry-run", "--gpu", "sm90",
    ]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and not out, out
    assert len(err.strip().splitlines()) == 1, err
    assert "disables shared-kv-pool, shared-kv-pool-check," in err, err
    assert SHARED_KV_ENV not in os.environ


def test_shared_kv_public_names_import_lazily():
    """Every name of ``sglang_cpkv.plugin.shared_kv`` loads (documented), without importing
    sglang."""
    import subprocess
    import sys

    code = (
        "import sys, sglang_cpkv.plugin.shared_kv as s\n"
        "for n in s.__all__:\n"
        "    assert getattr(s, n).__doc__, n\n"
        "assert 'sglang' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_preflight_hooks_under_the_flag_are_the_shared_kv_processes_hooks(monkeypatch):
    """Under ``--cpkv-shared-kv`` the preflight lists, and lets a debug break name, the hooks
    SGLang's processes will register (``CPKV_SHARED_KV=1`` there), shared-KV ones included."""
    from sglang_cpkv.serve._preflight import check_hooks

    monkeypatch.delenv(SHARED_KV_ENV, raising=False)
    monkeypatch.setenv("CPKV_DEBUG_BREAK_HOOK", "shared-kv-plan")
    assert check_hooks({}, shared_kv=True) == (*(s.name for s in SPECS), *SHARED_KV_NAMES)
