"""Debug-only plants for the GPU suite: a hook that fails to apply, a fault in the served path.

Both exist so a live server can show that the plugin's guards work: the planted failure must stop
start-up with one line, the planted fault must make a served batch read another request's KV
(what the contamination checks must catch). Neither is for users, and neither is in the hook
table of the README or the dry run (``table.SPECS``); the dry run and every process's
``cpkv[hooks]`` line say when a fault is on.

Env vars:
    ``CPKV_DEBUG_BREAK_HOOK``: a registered hook's name. The plugin registers that hook and then
        a second entry on the same target that SGLang's ``HookRegistry.apply_hooks`` cannot
        apply (a hook type it does not know), so SGLang logs the failure, skips the whole target
        and the plugin's applied-check stops the process, naming the hook and SGLang's error.
    ``CPKV_DEBUG_FAULT``: ``swap-kv-pages`` registers the fault hooks (``table.FAULT_SPECS``):
        in every batch of two or more requests, SGLang's DSA backend builds its page table with
        the first two requests' rows exchanged, so each attends over the other's KV.
    ``CPKV_DEBUG_FAULT_ACK``: must be ``i-want-wrong-output`` for ``CPKV_DEBUG_FAULT`` to be
        honoured; without it the plugin (and ``cpkv-serve``, before SGLang starts) refuses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from cpkv_cli.environment import CPKV_DEBUG_BREAK_HOOK, CPKV_DEBUG_FAULT, DEBUG_FAULT_ACK

from sglang_cpkv.errors import DebugPlantError

__all__ = [
    "ACK",
    "ACK_ENV",
    "BREAK_ENV",
    "FAULTS",
    "FAULT_ENV",
    "active_fault",
    "broken_hook",
    "plant_break",
]

BREAK_ENV = "CPKV_DEBUG_BREAK_HOOK"
FAULT_ENV = "CPKV_DEBUG_FAULT"
ACK_ENV = "CPKV_DEBUG_FAULT_ACK"
ACK = DEBUG_FAULT_ACK
#: fault name -> what it does, for refusals, the dry run and the ``cpkv[hooks]`` line
FAULTS = {
    "swap-kv-pages": (
        "in every batch of two or more requests SGLang's DSA backend reads the first two "
        "requests' page-table rows exchanged, so each attends over the other's KV"
    ),
}


def active_fault(env: Mapping[str, str] | None = None) -> str | None:
    """The debug fault to plant (None: none asked for).

    Raises:
        DebugPlantError: ``CPKV_DEBUG_FAULT`` names no fault, or lacks its acknowledgement.
    """
    env = os.environ if env is None else env
    fault = CPKV_DEBUG_FAULT.read(env, error=DebugPlantError)
    if fault is None:
        return None
    if fault not in FAULTS:
        raise DebugPlantError(
            f"{FAULT_ENV}={fault!r} names no debug fault (known: {', '.join(FAULTS)}). "
            f"Fix: unset {FAULT_ENV}."
        )
    ack = env.get(ACK_ENV)
    if ack != ACK:
        got = "" if ack is None else f" (got {ACK_ENV}={ack!r})"
        raise DebugPlantError(
            f"{FAULT_ENV}={fault} plants a fault that serves wrong answers on purpose "
            f"({FAULTS[fault]}); it is for the GPU suite's contamination check and runs only "
            f"with {ACK_ENV}={ACK}{got}. Fix: unset {FAULT_ENV}."
        )
    return fault


def broken_hook(names: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The hook whose application to break (None: none asked for).

    Args:
        names: the hooks this process registers; the break must name one of them.

    Raises:
        DebugPlantError: ``CPKV_DEBUG_BREAK_HOOK`` names none of ``names``.
    """
    env = os.environ if env is None else env
    name = CPKV_DEBUG_BREAK_HOOK.read(env, error=DebugPlantError)
    if name is None:
        return None
    if name not in names:
        raise DebugPlantError(
            f"{BREAK_ENV}={name!r} names no hook this deployment registers (registered: "
            f"{', '.join(names) or 'none'}). Fix: name one of them, or unset {BREAK_ENV}."
        )
    return name


class _UnknownHookType:
    """What :func:`plant_break` registers as the hook type: it has the ``value`` that
    ``HookRegistry.register`` logs, and is none of SGLang's ``HookType`` members, so
    ``apply_hooks`` raises ``ValueError: Unknown hook type: ...`` on the target and skips it."""

    def __init__(self, name: str) -> None:
        self.value = f"planted by {BREAK_ENV}={name}"

    def __str__(self) -> str:
        return self.value


def plant_break(spec: Any) -> None:
    """Make SGLang's ``apply_hooks`` fail on ``spec``'s target (its hook is already registered).

    The failure is SGLang's own: its registry logs it, leaves the target unpatched (so the
    plugin's hook is not in place either) and carries on, as it does for a target that moved.
    """
    from sglang.srt.plugins.hook_registry import HookRegistry

    def unappliable(original: Any, *args: Any, **kwargs: Any) -> Any:  # never wrapped
        return original(*args, **kwargs)

    HookRegistry.register(spec.target, unappliable, _UnknownHookType(spec.name))  # type: ignore[arg-type]
