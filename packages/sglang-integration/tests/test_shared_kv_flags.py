"""``--cpkv-shared-kv`` and its dry-run flags: parsed, validated, translated for SGLang; the
plugin's hook table grows by the shared-KV hooks only under ``CPKV_SHARED_KV=1``."""

from __future__ import annotations

import pytest
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
    off = enabled_specs(env={SHARED_KV_ENV: "1", "CPKV_DISABLE_HOOKS": "shared-kv-gate"})
    assert "shared-kv-gate" not in [s.name for s in off]


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
