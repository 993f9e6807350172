"""The SGLang plugin entry point: ``cpkv = "sglang_cpkv.plugin.entry:load"`` in the package's
``pyproject.toml`` (group ``sglang.srt.plugins``).

SGLang's ``load_plugins()`` runs :func:`load` in the launcher, in ``Engine.__init__`` and at the
start of every scheduler (and detokenizer / DP controller) process, then calls
``HookRegistry.apply_hooks()``. :func:`load` checks the sglang version, checks every hook target's
signature (and, for the shared-KV hooks, the private SGLang names the pool relies on), and only
then registers the hooks, so a refusal leaves SGLang unpatched. It raises
:class:`~sglang_cpkv.errors.PluginRefused` (a ``SystemExit``) on refusal, because
``load_plugins()`` logs and swallows ordinary exceptions and would serve without the fixes.
Any other exception inside :func:`load` (a bug, a broken install) is turned into the same
refusal, carrying its type and message, for the same reason.
``apply_hooks`` swallows failures too, so :func:`load` also makes every later ``apply_hooks``
of the process check that each registered hook took (``plugin._applied``) and stop the process
with :class:`~sglang_cpkv.errors.StartRefused` when one did not, naming SGLang's error; when all
took, the process prints its one ``cpkv[hooks]`` line (``plugin._hooks_record``). Which hooks
this process registered is kept in ``plugin._registered``, where the hooks and the dry-run report
read it.

Env vars:
    ``CPKV_ALLOW_UNTESTED_SGLANG``: ``1`` loads on an sglang outside 0.5.20-0.5.23 (default unset).
    ``CPKV_DISABLE_HOOKS``: comma-separated hook names to skip, e.g. ``deepgemm-warmup``
        (default: none; names in ``sglang_cpkv.plugin.table.SPECS``). Under ``CPKV_SHARED_KV=1``
        naming a shared-KV hook is refused: the four are one unit.
    ``CPKV_SHARED_KV``: ``1`` also registers the shared-KV hooks (``SHARED_KV_SPECS``); set by
        ``cpkv-serve --cpkv-shared-kv`` and inherited by SGLang's processes (default unset).
    ``CPKV_HOOKS_RECORD_DIR``: each process writes ``hooks-<pid>.json`` there after its check
        (``plugin._hooks_record``; default unset: no file).
    ``CPKV_DEBUG_BREAK_HOOK``, ``CPKV_DEBUG_FAULT``, ``CPKV_DEBUG_FAULT_ACK``: debug-only plants
        for the GPU suite (``plugin._debug``; default unset).
    ``SGLANG_PLUGINS`` (SGLang's): when set, a whitelist that must include ``cpkv``.
    Each ``CPKV_*`` one is declared and parsed in ``cpkv_cli.environment``; ``cpkv-serve`` checks
    them all before SGLang starts, these processes read them through the same parsers.
"""

from __future__ import annotations

import logging
import os

from cpkv_cli import InputError
from cpkv_cli.environment import (
    CPKV_DEBUG_BREAK_HOOK,
    CPKV_DISABLE_HOOKS,
    CPKV_SHARED_KV,
    READ_BY,
    check_environment,
)

from sglang_cpkv.errors import (
    CpkvSGLangError,
    DebugPlantError,
    HookDriftError,
    PluginRefused,
    SharedKVError,
    StartRefused,
)
from sglang_cpkv.plugin import _debug, _registered
from sglang_cpkv.plugin._registered import registered_hooks
from sglang_cpkv.plugin._version_guard import check_sglang_version

logger = logging.getLogger("sglang_cpkv")

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "cpkv"
DISABLE_ENV = "CPKV_DISABLE_HOOKS"
SHARED_KV_ENV = "CPKV_SHARED_KV"


def enabled_specs(env: dict[str, str] | None = None) -> tuple:
    """The hook specs to register: ``SPECS`` (plus ``SHARED_KV_SPECS`` under
    ``CPKV_SHARED_KV=1``) minus the names in ``CPKV_DISABLE_HOOKS``, plus the hooks of an
    acknowledged ``CPKV_DEBUG_FAULT`` (``plugin._debug``).

    Raises:
        HookDriftError: ``CPKV_DISABLE_HOOKS`` names a hook that does not exist.
        SharedKVError: ``CPKV_SHARED_KV=1`` and ``CPKV_DISABLE_HOOKS`` names a shared-KV hook
            (they are one unit).
        DebugPlantError: ``CPKV_DEBUG_FAULT`` names no fault or lacks its acknowledgement.
    """
    from sglang_cpkv.plugin.table import FAULT_SPECS, SHARED_KV_SPECS, SPECS

    env = os.environ if env is None else env
    disabled = set(CPKV_DISABLE_HOOKS.read(env, error=HookDriftError))
    known = [s.name for s in (*SPECS, *SHARED_KV_SPECS)]
    unknown = disabled - set(known)
    if unknown:
        raise HookDriftError(
            f"{DISABLE_ENV} names unknown hooks {sorted(unknown)}; known: "
            f"{known}. Fix: correct the names or unset {DISABLE_ENV}."
        )
    shared_kv = CPKV_SHARED_KV.read(env, error=SharedKVError)
    if shared_kv:
        _refuse_partial_shared_kv(disabled, [s.name for s in SHARED_KV_SPECS])
    specs = (*SPECS, *SHARED_KV_SPECS) if shared_kv else SPECS
    fault = _debug.active_fault(env)
    faults = FAULT_SPECS[fault] if fault else ()
    return (*(s for s in specs if s.name not in disabled), *faults)


def _refuse_partial_shared_kv(disabled: set[str], shared: list[str]) -> None:
    """The shared-KV hooks are one unit: under ``CPKV_SHARED_KV=1`` none may be disabled.

    Without the pool REPLACE or its check SGLang builds its own value-keyed pool (under a
    backend its own gate would refuse); without the plan a rank that holds no token of a request
    raises while the others wait in the next collective; without the gate SGLang's trtllm-only
    check decides.

    Raises:
        SharedKVError: ``CPKV_DISABLE_HOOKS`` names a shared-KV hook.
    """
    off = [n for n in shared if n in disabled]
    if off:
        raise SharedKVError(
            f"--cpkv-shared-kv ({SHARED_KV_ENV}=1) needs all of its hooks ({', '.join(shared)}) "
            f"but {DISABLE_ENV} disables {', '.join(off)}, and SGLang would then run its own "
            f"sharded KV code there. Fix: take {', '.join(off)} out of {DISABLE_ENV}, or run "
            f"without --cpkv-shared-kv."
        )


def load() -> None:
    """Check the sglang version and every hook target, then register the hooks (each once).

    A second call registers only hooks enabled since the first (``CPKV_SHARED_KV`` set later).

    Raises:
        PluginRefused: unsupported sglang, a drifted or unimportable hook target, a bad
            ``CPKV_DISABLE_HOOKS`` or debug plant, or any other exception inside (its type and
            message in the one line: ``load_plugins()`` would log it and serve without us).
    """
    try:
        _load()
    except Exception as err:  # PluginRefused is a SystemExit: it passes as it is
        cause = " ".join(f"{type(err).__name__}: {err}".split())
        message = (
            f"its load() failed with {cause}, and SGLang would serve without the plugin's "
            f"hooks. Fix: reinstall sglang-integration with the workspace's packages, or "
            f"report this line"
        )
        _log_refusal("sglang-cpkv plugin refused to load: %s", message)
        raise PluginRefused(message) from err


def _load() -> None:
    from sglang_cpkv.plugin._framework import check_target, register

    try:  # cpkv-serve checked them at start; `sglang serve` with the plugin installed did not
        check_environment(READ_BY["cpkv-serve"])
    except InputError as err:  # a bad value would otherwise raise inside a forward
        _log_refusal("sglang-cpkv plugin refused to load: %s", err)
        raise PluginRefused(str(err)) from err
    try:
        version = check_sglang_version()
        enabled = enabled_specs()
        specs = [s for s in enabled if s.name not in registered_hooks()]
        if not specs and _registered.loaded() is not None:
            return
        broken = _debug.broken_hook([s.name for s in enabled])
        for spec in specs:  # all checks before the first registration
            check_target(spec)
        if any(s.name.startswith("shared-kv") for s in specs):
            _check_private_surface(version)
        for spec in specs:
            _registered.add(spec, register(spec))
            if spec.name == broken:
                _debug.plant_break(spec)
    except CpkvSGLangError as err:
        _log_refusal("sglang-cpkv plugin refused to load: %s", err)
        raise PluginRefused(str(err)) from err
    from sglang_cpkv.plugin._applied import verify_after_apply

    verify_after_apply(check_hooks_took)
    _registered.mark_loaded(tuple(s.name for s in specs))
    names = ", ".join(registered_hooks())
    logger.info("sglang-cpkv plugin loaded on sglang %s: hooks %s", version, names)


def _log_refusal(fmt: str, message: object) -> None:
    """Log a refusal where the process has logging set up (SGLang's processes do); without a
    handler the ``SystemExit`` that follows prints the same one line, so do not print it twice."""
    if logger.hasHandlers():
        logger.critical(fmt, message)


def _check_private_surface(version: str) -> None:
    from sglang_cpkv.plugin.shared_kv._surface import private_surface_problems

    problems = private_surface_problems()
    if problems:
        raise HookDriftError(
            f"--cpkv-shared-kv relies on private names of SGLang's sharded pool that moved in "
            f"sglang {version}: {'; '.join(problems)}. Fix: install sglang 0.5.23, or run "
            f"without --cpkv-shared-kv (SGLang's own sharding), or update sglang-integration."
        )


def check_hooks_took() -> None:
    """After ``HookRegistry.apply_hooks()``: every hook this process registered took; then the
    process's ``cpkv[hooks]`` line (and record file, ``plugin._hooks_record``).

    Raises:
        StartRefused: a hook did not apply (naming SGLang's error for its target, when SGLang
            logged one), so SGLang would serve its own code there.
    """
    from sglang_cpkv.plugin._applied import apply_failure, not_applied
    from sglang_cpkv.plugin._hooks_record import report
    from sglang_cpkv.plugin._version_guard import installed_sglang_version
    from sglang_cpkv.plugin.table import FAULT_SPECS

    hooks = _registered.hooks()
    missing = not_applied(hooks)
    version = installed_sglang_version()
    names = {s.name for s, _ in hooks}
    fault = next((f for f, fs in FAULT_SPECS.items() if fs[0].name in names), None)
    report(
        version,
        [s.name for s, _ in hooks if s not in missing],
        [s.name for s in missing],
        fault,
    )
    if not missing:
        return
    first = missing[0]
    cause = apply_failure(first.target)
    why = f"HookRegistry.apply_hooks failed on its target with {cause}" if cause else (
        "HookRegistry.apply_hooks logged why above"
    )  # fmt: skip
    if first.name == CPKV_DEBUG_BREAK_HOOK.read(error=DebugPlantError):
        fix = f"unset {_debug.BREAK_ENV} (it planted this failure, for testing)"
    else:
        fix = (
            "remove the plugin whose hook on that target SGLang refused, install sglang "
            "0.5.23, or disable the hook by name in CPKV_DISABLE_HOOKS"
        )
    message = (
        f"hook {first.name} -> {first.target} did not take on sglang {version} ({why}; "
        f"{len(missing)} of {len(hooks)} hooks did not) and SGLang would serve its own code "
        f"there. Fix: {fix}."
    )
    _log_refusal("sglang-cpkv stopped SGLang before serving: %s", message)
    raise StartRefused(message)


def activate() -> tuple[str, ...]:
    """Load the plugin the way SGLang does: ``sglang.srt.plugins.load_plugins()``.

    Returns:
        The registered hook names.

    Raises:
        PluginRefused: the plugin refused, or ``load_plugins()`` did not run it (not installed
            as the ``cpkv`` entry point, or excluded by ``SGLANG_PLUGINS``).
    """
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    load_plugins()
    loaded = _registered.loaded()
    if loaded is not None and any(s.name not in loaded for s in enabled_specs()):
        load()  # hooks enabled after SGLang loaded the plugin in this process
        HookRegistry.apply_hooks()
    if _registered.loaded() is None:
        raise PluginRefused(
            f"SGLang's load_plugins() did not run the cpkv plugin. {_why_not_run()}."
        )
    return registered_hooks()


def _why_not_run() -> str:
    """Why ``load_plugins()`` ran without loading us, as far as this process can tell: SGLang
    logs and swallows an entry point that fails to import, so import it again for the cause."""
    from importlib.metadata import entry_points

    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and ENTRY_POINT_NAME not in {x.strip() for x in allowed.split(",")}:
        return f"Fix: SGLANG_PLUGINS={allowed!r} does not include {ENTRY_POINT_NAME!r}; add it"
    ours = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == ENTRY_POINT_NAME]
    if not ours:
        return (
            f"Fix: install sglang-integration so its {ENTRY_POINT_GROUP} entry point "
            f"{ENTRY_POINT_NAME!r} is visible (pip install -e packages/sglang-integration)"
        )
    try:
        found = ours[0].load()
    except Exception as err:
        cause = " ".join(f"{type(err).__name__}: {err}".split())
        return (
            f"Its entry point {ours[0].value} failed to import with {cause} (SGLang logged and "
            f"skipped it). Fix: reinstall sglang-integration"
        )
    if found is not load:
        return (
            f"Its entry point {ENTRY_POINT_NAME!r} = {ours[0].value} is not "
            f"{__name__}:load (a stale install). Fix: reinstall sglang-integration"
        )
    return "Fix: check SGLANG_PLATFORM (SGLang skips the plugins of unselected platforms)"
