"""The public surface of ``cpkv_validate``: ``__all__`` is what it exports, and all documented."""

from __future__ import annotations

import inspect

import cpkv_validate as v

#: Submodules a user runs (``python -m``); they are not re-exported names.
ENTRY_MODULES = {"cli", "refserver"}


def test_all_is_the_public_surface():
    assert len(set(v.__all__)) == len(v.__all__)
    for name in v.__all__:  # imported on first use (PEP 562); every one resolves
        getattr(v, name)
    public = {n for n in vars(v) if not n.startswith("_")} - {"annotations"} - ENTRY_MODULES
    assert public == set(v.__all__), sorted(public ^ set(v.__all__))
    assert set(dir(v)) >= set(v.__all__)


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        v.nope  # noqa: B018


def test_every_public_callable_and_class_has_a_docstring():
    for name in v.__all__:
        obj = getattr(v, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"cpkv_validate.{name} has no docstring"


def test_console_script_target_exists():
    from cpkv_validate.cli import main

    assert main is v.main
