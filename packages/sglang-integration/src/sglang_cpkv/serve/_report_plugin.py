"""What the dry-run report says about the plugin itself, so it describes what will run.

- :func:`hooks_section`: the hooks registered, those ``CPKV_DISABLE_HOOKS`` leaves out, and a
  debug fault's hooks apart from them (``CPKV_DEBUG_FAULT``: wrong answers on purpose).
- :func:`warmup_as_sglang_runs_it`: with the ``deepgemm-warmup`` hook off, SGLang warms its own
  list for every kernel; the plan's cpkv rows are replaced by SGLang's.
- :func:`resolved_notes`: a size SGLang resolved to something other than what was asked
  (``--attn-cp-size 1`` under DSA prefill CP becomes ``tp / attention dp``).
- :func:`pd_mode` and :func:`speculative`: SGLang's ``"null"``/``None`` said as ``off``.
"""

from __future__ import annotations

from typing import Any

from sglang_cpkv.serve._sglang_argv import SGLangArgs

WARMUP_HOOK = "deepgemm-warmup"


def hooks_section() -> dict[str, Any]:
    """``{"on": [...], "off": [...]}``: the hooks this process registered, and the others; with
    ``"debug_fault": {"name", "hooks", "effect"}`` when a debug fault's hooks are registered
    (they are not fixes, so they are in neither list nor the hook table)."""
    from sglang_cpkv.plugin._debug import FAULTS
    from sglang_cpkv.plugin._registered import registered_hooks
    from sglang_cpkv.plugin.table import FAULT_SPECS, SPECS

    registered = list(registered_hooks())
    faults = {s.name: name for name, specs in FAULT_SPECS.items() for s in specs}
    on = [n for n in registered if n not in faults]
    section: dict[str, Any] = {"on": on, "off": [s.name for s in SPECS if s.name not in on]}
    planted = [n for n in registered if n in faults]
    if planted:
        name = faults[planted[0]]
        section["debug_fault"] = {"name": name, "hooks": planted, "effect": FAULTS[name]}
    return section


def warmup_as_sglang_runs_it(section: dict[str, Any], hooks_on: list[str]) -> dict[str, Any]:
    """``section`` (the report's warmup plan) as it runs with the hooks in ``hooks_on``.

    With the warmup hook on, unchanged. Off, every value that has an SGLang twin (``ms`` and
    ``sglang_ms``, ``total_ms`` and ``sglang_total_ms``, ...) takes the twin's value, and each
    kernel's reason says why.
    """
    if WARMUP_HOOK in hooks_on or "kernels" not in section:
        return section
    why = f"SGLang's own list: the {WARMUP_HOOK} hook is off (CPKV_DISABLE_HOOKS)"
    out = _take_sglang_values(section)
    out["kernels"] = {
        name: {**_take_sglang_values(row), "shrink": 0, "reason": why}
        for name, row in section["kernels"].items()
    }
    out["shapes"] = [
        {**_take_sglang_values(row), "shrinks": False, "reason": why}
        for row in section.get("shapes", [])
    ]
    out["hook"] = "off"
    return out


def _take_sglang_values(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(f"sglang_{k}", v) for k, v in row.items()}


def resolved_notes(given: SGLangArgs, resolved: dict[str, Any]) -> list[str]:
    """One note per parallel size SGLang resolved to other than what ``given`` asked."""
    notes = []
    asked, got = given.attn_cp_size, resolved.get("attn_cp_size")
    if got is not None and got != asked:
        why = ""
        if resolved.get("enable_prefill_cp") and asked == 1:
            why = (
                ": under DSA prefill CP SGLang reads 1 (its default) as the whole attention TP "
                "group, tp / attention dp"
            )
        spelled = given.name("attn_cp_size")
        asked_as = (
            f"{spelled} {asked}"
            if "attn_cp_size" in given.spelled
            else f"the default {spelled} {asked}"
        )
        notes.append(f"{asked_as} resolved to {got}{why}")
    return notes


def pd_mode(mode: Any) -> str:
    """SGLang's ``disaggregation_mode`` in words: ``"null"`` (no PD) is ``off``."""
    return "off" if mode in (None, "null") else str(mode)


def speculative(algorithm: Any) -> str:
    """SGLang's ``speculative_algorithm`` in words: unset is ``off``."""
    return "off" if algorithm in (None, "NONE") else str(algorithm)
