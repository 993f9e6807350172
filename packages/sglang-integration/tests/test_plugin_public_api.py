"""The public surface of sglang_cpkv (the plugin side) and its import cost."""

from __future__ import annotations

import subprocess
import sys

import sglang_cpkv


def test_all_is_the_public_surface():
    assert sorted(sglang_cpkv.__all__) == sorted(
        [
            "SUPPORTED_RANGE",
            "activate",
            "check_sglang_version",
            "load",
            "registered_hooks",
            "CpkvSGLangError",
            "DsaBackendError",
            "HookDriftError",
            "PluginRefused",
            "SharedKVError",
            "UnsupportedSGLangError",
        ]
    )
    for name in sglang_cpkv.__all__:
        assert hasattr(sglang_cpkv, name), name


def test_import_is_light():
    """Importing the package, its hooks and cpkv-serve imports neither sglang nor torch."""
    code = (
        "import sys, sglang_cpkv, sglang_cpkv.hooks, sglang_cpkv.serve, sglang_cpkv.plugin\n"
        "heavy = [m for m in ('sglang', 'torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_errors_tree():
    from sglang_cpkv import errors

    assert issubclass(errors.UnsupportedSGLangError, (errors.CpkvSGLangError, RuntimeError))
    assert issubclass(errors.HookDriftError, (errors.CpkvSGLangError, RuntimeError))
    assert issubclass(errors.DsaBackendError, (errors.CpkvSGLangError, ValueError))
    assert issubclass(errors.SharedKVError, (errors.CpkvSGLangError, ValueError))
    assert str(errors.PluginRefused("x")) == "sglang-cpkv plugin refused to load: x"
