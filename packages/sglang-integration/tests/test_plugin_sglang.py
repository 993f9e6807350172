"""The plugin inside the real sglang 0.5.23: discovery by load_plugins(), hooks on their targets.

Runs in-process after one ``load_plugins()``; the GPU is emulated as described in
``_sglang_env`` (only the capability query is replaced).
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import _sglang_env as env
import pytest
from sglang_cpkv.plugin._framework import resolve_target, signature_of
from sglang_cpkv.plugin.entry import enabled_specs

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]


# Discovery and hooks --------------------------------------------------------------------------


def test_entry_point_found_and_run_by_load_plugins(plugin):
    import sglang.srt.plugins as plugins
    import sglang_cpkv.plugin.entry

    (ep,) = [e for e in entry_points(group=plugins.GENERAL_PLUGINS_GROUP) if e.name == "cpkv"]
    assert ep.value == "sglang_cpkv.plugin.entry:load"
    func, dist = plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP)["cpkv"]
    assert func is sglang_cpkv.plugin.entry.load and dist == "sglang-integration"
    assert plugins._plugins_loaded
    assert plugin == tuple(s.name for s in enabled_specs())


def test_sglang_plugins_whitelist_skips_us(monkeypatch):
    import sglang.srt.plugins as plugins

    monkeypatch.setenv("SGLANG_PLUGINS", "someone_else")
    assert "cpkv" not in plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP)
    monkeypatch.setenv("SGLANG_PLUGINS", "someone_else,cpkv")
    assert "cpkv" in plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP)


def test_each_hook_applied_to_its_real_target(plugin):
    from sglang.srt.plugins.hook_registry import HookRegistry

    for spec in enabled_specs():
        _, _, current = resolve_target(spec.target)
        assert spec.target in HookRegistry._patched, spec.name
        closure = [c.cell_contents for c in current.__closure__ or ()]
        assert spec.hook in closure, f"{spec.target} is not wrapped by the {spec.name} hook"
        assert signature_of(current) == spec.params


def test_hooks_reach_from_imports(plugin):
    """Modules that did ``from x import f`` call the hooked function too."""
    import sglang.srt.arg_groups.model_hook as model_hook
    import sglang.srt.arg_groups.overrides as overrides
    import sglang.srt.configs.model_config as model_config
    import sglang.srt.utils.hf_transformers as hf
    import sglang.srt.utils.hf_transformers.config as hf_config

    assert model_config.get_config is hf_config.get_config is hf.get_config
    assert model_hook._dsa_split_backend_resolution is overrides._dsa_split_backend_resolution
    assert hasattr(hf_config.get_config, "__wrapped__")


def test_trap_avoided_after_apply(plugin):
    """No sglang_cpkv global is a hook target or its wrapper (the registry rebinds such names)."""
    held = set()
    for spec in enabled_specs():
        fn = resolve_target(spec.target)[2]
        while fn is not None:
            held.add(id(fn))
            fn = getattr(fn, "__wrapped__", None)
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang_cpkv"):
            bad = [k for k, v in vars(mod).items() if id(v) in held]
            assert not bad, f"{name} holds {bad}"


def test_post_process_pass_takes_no_resolution_hook():
    from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook

    with pytest.raises(ValueError, match="not an overridable resolution hook"):
        register_resolution_hook("_dsa_split_backend_resolution")


@pytest.mark.parametrize(("name", "value"), [("CPKV_DEBUG", "maybe"), ("CPKV_BACKEND", "cuda9")])
def test_load_refuses_a_bad_environment_variable(monkeypatch, name, value):
    """``sglang serve`` with the plugin installed checks nothing at start: the plugin's load()
    does, once, so a bad value stops SGLang's process at start instead of raising inside a
    forward (the ops read them per call)."""
    from sglang_cpkv.errors import PluginRefused
    from sglang_cpkv.plugin import _registered
    from sglang_cpkv.plugin.entry import load

    before = _registered.registered_hooks()
    monkeypatch.setenv(name, value)
    with pytest.raises(PluginRefused, match=f"refused to load: {name}="):
        load()
    assert _registered.registered_hooks() == before
