"""The hooks the plugin registered in this process: the one place hooks and reports read it.

:func:`sglang_cpkv.plugin.entry.load` writes it (:func:`add`, then :func:`mark_loaded`); a hook
that behaves differently when another hook is on (the shared-KV gate admits RAGGED deployments
only when the RAGGED offset fix is registered) and the dry-run report read it. Hooks import this
module, never the entry point or the table, so imports run one way: entry -> table -> hooks ->
this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add", "hooks", "loaded", "mark_loaded", "registered_hooks", "registered_target"]

#: names of the hooks registered in this process, in order; None before the plugin loaded
_names: tuple[str, ...] | None = None
#: (spec, registered object) of every hook registered in this process
_hooks: list[tuple[Any, Any]] = []


def add(spec: Any, hook: Any) -> None:
    """Remember that ``spec``'s hook was handed to SGLang's registry as ``hook``."""
    _hooks.append((spec, hook))


def mark_loaded(names: tuple[str, ...]) -> None:
    """Record ``names`` as registered (after every one of them was checked and registered)."""
    global _names
    _names = (*(_names or ()), *names)


def loaded() -> tuple[str, ...] | None:
    """The registered names, or None when the plugin has not loaded in this process."""
    return _names


def hooks() -> list[tuple[Any, Any]]:
    """(spec, registered object) of every hook registered in this process."""
    return _hooks


def registered_hooks() -> tuple[str, ...]:
    """Names of the hooks the plugin registered in this process (empty before it loaded)."""
    return _names or ()


def registered_target(target: str) -> bool:
    """Whether a hook registered in this process (by name, see :func:`registered_hooks`) patches
    ``target``."""
    names = set(registered_hooks())
    return any(spec.target == target and spec.name in names for spec, _ in _hooks)
