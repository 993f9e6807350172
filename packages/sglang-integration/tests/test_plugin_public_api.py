"""The public surface of sglang_cpkv (the plugin side) and its import cost."""

from __future__ import annotations

import subprocess
import sys

import sglang_cpkv


def test_all_is_the_public_surface():
    """Every name of ``__all__`` imports and says what it is; every error class is exported
    (a restated list of names would only test itself)."""
    import inspect

    from sglang_cpkv import errors

    for name in sglang_cpkv.__all__:
        value = getattr(sglang_cpkv, name)
        assert isinstance(value, str) or (value.__doc__ or "").strip(), name
    raised = {
        n for n, v in vars(errors).items() if inspect.isclass(v) and v.__module__ == errors.__name__
    }
    assert raised <= set(sglang_cpkv.__all__), raised - set(sglang_cpkv.__all__)


def test_import_is_light():
    """Importing the package, its hooks and cpkv-serve imports neither sglang nor torch."""
    code = (
        "import sys, sglang_cpkv, sglang_cpkv.plugin.table, sglang_cpkv.serve.cli\n"
        "import sglang_cpkv.plugin.entry\n"
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
