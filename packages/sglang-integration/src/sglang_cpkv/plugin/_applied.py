"""Patch, then check that the patch took: every registered hook, after SGLang applied it.

``HookRegistry.apply_hooks`` catches and logs every exception per target, and SGLang then serves
with its own code in that place (a renamed attribute in the next release, or another plugin's
hook that SGLang refuses on the same target, is enough). Our shared-KV gate would already have
admitted deployments only our pool serves. So the plugin wraps ``HookRegistry.apply_hooks`` once
per process (:func:`verify_after_apply`): after SGLang's own pass, each target we registered
must resolve to our class (a class REPLACE) or to a wrapper that calls our hook, and SGLang
must have marked it patched; otherwise the process stops with one line naming the hook, the
target, the SGLang version and the exception SGLang logged for that target (read from SGLang's
own log record while its pass runs, :func:`apply_failure`). Every SGLang process applies hooks
through ``load_plugins()`` (launcher, engine, each scheduler, i.e. each TP/CP worker), so every
process that serves checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sglang_cpkv.errors import CpkvSGLangError
from sglang_cpkv.plugin._framework import HookSpec, resolve_target

__all__ = ["apply_failure", "calls_hook", "not_applied", "verify_after_apply"]

#: target -> ``"TypeName: message"`` of the exception SGLang's last pass logged for it
_FAILURES: dict[str, str] = {}


class _FailureRecorder(logging.Filter):
    """Keeps the exception of each ``logger.exception("Failed to apply hooks to %s", target)``
    SGLang's ``apply_hooks`` logs (and swallows), so the refusal can name the cause. A filter
    that passes every record, not a handler: the record still goes where SGLang's logging
    sends it (Python's last-resort stderr handler where none is configured yet)."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        args = record.args if isinstance(record.args, tuple) else ()
        if err is not None and args and isinstance(args[0], str):
            _FAILURES[args[0]] = " ".join(f"{type(err).__name__}: {err}".split())
        return True


def apply_failure(target: str) -> str | None:
    """``"TypeName: message"`` that SGLang's last ``apply_hooks`` raised (and logged) on
    ``target``; None when it logged none (or its logger was silenced)."""
    return _FAILURES.get(target)


def calls_hook(value: Any, hook: Any) -> bool:
    """Whether ``value`` is ``hook`` or a wrapper chain (``__wrapped__``) that closes over it."""
    seen = 0
    fn = value
    while fn is not None and seen < 32:  # another plugin may wrap ours: walk the chain
        if fn is hook:
            return True
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if cell.cell_contents is hook:
                    return True
            except ValueError:  # empty cell
                continue
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return False


def not_applied(hooks: Iterable[tuple[HookSpec, Any]]) -> list[HookSpec]:
    """The spec of every registered hook SGLang did not apply (empty: all took)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    patched = getattr(HookRegistry, "_patched", set())
    missing = []
    for spec, hook in hooks:
        try:
            _, _, value = resolve_target(spec.target)
        except CpkvSGLangError:
            value = None
        if spec.target not in patched or not calls_hook(value, hook):
            missing.append(spec)
    return missing


def verify_after_apply(check: Callable[[], None]) -> None:
    """Run ``check`` after every ``HookRegistry.apply_hooks()`` of this process (installed once).

    ``check`` raises to stop the process (the plugin raises ``PluginRefused``, a ``SystemExit``
    that ``load_plugins()`` does not swallow).
    """
    from sglang.srt.plugins.hook_registry import HookRegistry

    current = HookRegistry.__dict__["apply_hooks"]
    checks = getattr(current.__func__, "cpkv_checks", None)
    if checks is not None:
        if check not in checks:
            checks.append(check)
        return
    apply = current.__func__
    sglang_log = logging.getLogger(HookRegistry.__module__)

    def apply_hooks(cls) -> None:
        recorder = _FailureRecorder()
        sglang_log.addFilter(recorder)
        try:
            apply(cls)
        finally:
            sglang_log.removeFilter(recorder)
        for each in apply_hooks.cpkv_checks:
            each()

    apply_hooks.cpkv_checks = [check]  # type: ignore[attr-defined]
    apply_hooks.__wrapped__ = apply  # type: ignore[attr-defined]
    apply_hooks.__doc__ = apply.__doc__
    HookRegistry.apply_hooks = classmethod(apply_hooks)
