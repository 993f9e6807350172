"""Hook specs: signature rendering, drift refusal, and SGLang's HookRegistry rebinding trap."""

from __future__ import annotations

import sys
import textwrap

import _sglang_env
import pytest
from sglang_cpkv import HookDriftError
from sglang_cpkv.plugin._framework import HookSpec, check_target, resolve_target, signature_of
from sglang_cpkv.plugin.table import SPECS

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


def _f1(a, b=1, *args, c, d=2, **kw): ...
def _f2(a, /, b): ...
def _f3(*, x): ...


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_f1, ("a", "b=", "*args", "c", "d=", "**kw")),
        (_f2, ("a", "/", "b")),
        (_f3, ("*", "x")),
        (lambda: None, ()),
    ],
)
def test_signature_of(fn, expected):
    assert signature_of(fn) == expected


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A throwaway importable package ``cpkv_scratch`` with a module ``target``."""
    pkg = tmp_path / "cpkv_scratch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "target.py").write_text(
        textwrap.dedent(
            """
            def f(x, y=1):
                return x + y

            class C:
                def m(self, x):
                    return x

                @staticmethod
                def s(x):
                    return x
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cpkv_scratch.target"
    for name in [m for m in sys.modules if m.startswith("cpkv_scratch")]:
        del sys.modules[name]


def _spec(target, params, hook=lambda orig, *a, **k: orig(*a, **k)):
    return HookSpec("scratch", target, "around", params, hook, "test")


def test_resolve_target_module_class_and_staticmethod(scratch):
    owner, attr, fn = resolve_target(f"{scratch}.f")
    assert attr == "f" and fn(1) == 2
    owner, attr, fn = resolve_target(f"{scratch}.C.m")
    assert owner.__name__ == "C" and signature_of(fn) == ("self", "x")
    _, _, fn = resolve_target(f"{scratch}.C.s")
    assert signature_of(fn) == ("x",)


def test_matching_signature_passes(scratch):
    check_target(_spec(f"{scratch}.f", ("x", "y=")))


@pytest.mark.parametrize(
    ("params", "actual"),
    [(("x", "y"), "(x, y=)"), (("x", "y=", "z="), "(x, y=)"), (("view",), "(x, y=)")],
)
def test_signature_drift_refused(scratch, params, actual):
    with pytest.raises(HookDriftError) as info:
        check_target(_spec(f"{scratch}.f", params))
    msg = str(info.value)
    assert f"{scratch}.f has signature {actual}" in msg
    assert f"written for ({', '.join(params)})" in msg
    assert "0.5.20 <= sglang <= 0.5.23" in msg and "Fix:" in msg


@pytest.mark.parametrize(
    "target", ["cpkv_scratch.target.gone", "cpkv_scratch.nomod.f", "cpkv_scratch.target.C.gone"]
)
def test_missing_target_refused(scratch, target):
    with pytest.raises(HookDriftError, match="does not exist in the installed sglang"):
        check_target(_spec(target, ("x",)))


def test_every_spec_matches_installed_sglang():
    """Each hook's recorded signature is the one its target has in sglang 0.5.23."""
    for spec in SPECS:
        check_target(spec)


def test_drift_on_a_real_target_refused():
    spec = next(s for s in SPECS if s.name == "dsa-backends")
    drifted = HookSpec(spec.name, spec.target, spec.kind, ("view", "extra"), spec.hook, spec.why)
    with pytest.raises(
        HookDriftError, match=r"_dsa_split_backend_resolution has signature \(view\)"
    ):
        check_target(drifted)


@pytest.fixture
def registry():
    """SGLang's real HookRegistry, with this test's registrations removed afterwards."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks = {k: list(v) for k, v in HookRegistry._hooks.items()}
    patched = set(HookRegistry._patched)
    yield HookRegistry, HookType
    HookRegistry._hooks.clear()
    HookRegistry._hooks.update(hooks)
    HookRegistry._patched.clear()
    HookRegistry._patched.update(patched)


def test_registry_trap_rebinds_module_level_original(scratch, registry, tmp_path):
    """The trap: HookRegistry rebinds a plugin's own ``_orig = mod.f`` to the wrapper."""
    HookRegistry, HookType = registry
    (tmp_path / "cpkv_scratch" / "naive_plugin.py").write_text(
        textwrap.dedent(
            """
            from cpkv_scratch import target
            _orig = target.f

            def hook(original, x, y=1):
                return _orig(x, y) * 10   # calls the module-level copy, not `original`
            """
        )
    )
    import cpkv_scratch.naive_plugin as naive
    import cpkv_scratch.target as target

    HookRegistry.register(f"{scratch}.f", naive.hook, HookType.AROUND)
    HookRegistry.apply_hooks()
    assert naive._orig is target.f  # rebound to the wrapper by _propagate_patch
    with pytest.raises(RecursionError):
        target.f(1)


def test_spec_style_hook_avoids_the_trap(scratch, registry):
    """Our hooks use the original SGLang passes to AROUND hooks: no recursion."""
    import cpkv_scratch.target as target
    from sglang_cpkv.plugin._framework import register

    def times_ten(original, *args, **kwargs):
        return original(*args, **kwargs) * 10

    register(_spec(f"{scratch}.f", ("x", "y="), times_ten))
    registry[0].apply_hooks()
    assert target.f(1) == 20
    assert signature_of(target.f) == ("x", "y=")  # the wrapper still reads as the original


def test_no_package_module_holds_an_original():
    """No sglang_cpkv module keeps a hook target at module level (what the trap would rebind)."""
    import sglang_cpkv.plugin.table  # noqa: F401

    targets = {id(resolve_target(s.target)[2]) for s in SPECS}
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang_cpkv"):
            held = [k for k, v in vars(mod).items() if id(v) in targets]
            assert not held, f"{name} holds hook targets at module level: {held}"


def test_disable_hooks_by_name():
    from sglang_cpkv.plugin.entry import DISABLE_ENV, enabled_specs

    names = [s.name for s in enabled_specs(env={DISABLE_ENV: "deepgemm-warmup, config-repair"})]
    assert names == ["indexcache-overrides", "tbo-index-sharing", "dsa-backends", "ragged-offsets"]
    assert len(enabled_specs(env={})) == len(SPECS) == 6
    with pytest.raises(HookDriftError, match=r"names unknown hooks \['nope'\]"):
        enabled_specs(env={DISABLE_ENV: "nope"})


def test_missing_dependency_api_refused():
    spec = next(s for s in SPECS if s.name == "config-repair")
    stale = HookSpec(spec.name, spec.target, spec.kind, spec.params, spec.hook, spec.why,
                     requires=("glm_config:no_such_function",))  # fmt: skip
    with pytest.raises(
        HookDriftError, match=r"calls glm_config.no_such_function.*pip install -U glm-config"
    ):
        check_target(stale)
