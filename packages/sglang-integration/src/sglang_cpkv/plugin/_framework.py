"""Hook specs: one target, one hook, the signature it was written for, checked before registering.

SGLang's ``HookRegistry.apply_hooks()`` replaces the target attribute and then walks
``sys.modules`` rebinding every module global that *is* the original function, to catch
``from x import f`` copies. That includes a plugin's own ``_orig = mod.f``: after the patch
``_orig`` is the wrapper, and a hook that calls ``_orig`` calls itself until ``RecursionError``.
Hooks here therefore never keep an original at module level: AROUND hooks receive the original
as their first argument (bound in SGLang's wrapper closure), and REPLACE hooks do not call it.
``tests/test_hooks_framework.py`` reproduces the trap and checks no module of this package holds
a patched function after the plugin is applied.

Before registering, each spec resolves its target and compares the target's parameters with the
ones the hook was written for; a missing target or a changed signature raises
:class:`HookDriftError` naming both, so a future sglang fails at start-up instead of mid-request.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sglang_cpkv.errors import HookDriftError, HookTargetImportError
from sglang_cpkv.plugin._releases import TESTED, release
from sglang_cpkv.plugin._version_guard import SUPPORTED_RANGE

HookKind = Literal["before", "after", "around", "replace"]


@dataclass(frozen=True)
class HookSpec:
    """One hook on one SGLang function.

    Attributes:
        name: short id used in logs and reports, e.g. ``"dsa-backends"``.
        target: dotted path ``"package.module.func"`` or ``"package.module.Class.method"``.
        kind: SGLang ``HookType`` name (lower case).
        params: the target's parameters as :func:`signature_of` renders them, e.g.
            ``("self", "model", "trust_remote_code", "revision=", "**kwargs")``.
        hook: the callable handed to ``HookRegistry.register``.
        why: one line on what the hook fixes, shown in reports.
        requires: ``"module:attribute"`` names from the project's other packages the hook calls;
            checked with the target so a stale install refuses at start-up.
        lazy: ``hook`` is a zero-argument loader returning the hook (for a hook that imports
            SGLang, such as a class replacing a target class), called when registering.
        runs_in: which process calls the target (the launcher while SGLang resolves its
            arguments, each scheduler while it serves).
        since: the first release of ``_releases.TESTED`` whose target has ``params`` (empty:
            the first of them); :attr:`checked` lists the releases from there on.
        corrects: the upstream behaviour the hook corrects, one line: SGLang file and function,
            then what goes wrong.
        delete_when: the upstream change that would let us delete the hook.

    The last four are the hook's way out (``cpkv-serve --dry-run`` and the package README print
    them from the table); ``tests/test_hook_table.py`` holds every entry of the table to them.
    """

    name: str
    target: str
    kind: HookKind
    params: tuple[str, ...]
    hook: Callable[..., Any]
    why: str
    requires: tuple[str, ...] = ()
    lazy: bool = False
    runs_in: str = ""
    since: str = ""
    corrects: str = ""
    delete_when: str = ""

    @property
    def checked(self) -> tuple[str, ...]:
        """The releases whose source this hook's target is checked against, with ``params``:
        the locked one in every test run, each other one in CI's range step
        (``scripts/sglang-range``), all read from ``_releases.TESTED``."""
        first = release(self.since or TESTED[0])
        return tuple(v for v in TESTED if release(v) >= first)


def signature_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Parameters of ``fn`` without annotations or default values.

    ``name`` required, ``name=`` has a default, ``*``/``/`` markers as in ``def``,
    ``*args`` and ``**kwargs`` spelled out. Follows ``__wrapped__`` (``functools.wraps``), so a
    cached or already-hooked function reports the signature of the function it wraps.
    """
    sig = inspect.signature(fn)
    out: list[str] = []
    star = False
    positional_only = False
    for p in sig.parameters.values():
        if positional_only and p.kind is not p.POSITIONAL_ONLY:
            out.append("/")
            positional_only = False
        if p.kind is p.VAR_POSITIONAL:
            out.append(f"*{p.name}")
            star = True
        elif p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                out.append("*")
                star = True
            positional_only = p.kind is p.POSITIONAL_ONLY
            out.append(p.name + ("=" if p.default is not p.empty else ""))
    if positional_only:
        out.append("/")
    return tuple(out)


def resolve_target(target: str) -> tuple[Any, str, Any]:
    """Import ``target`` and return ``(owner, attribute name, current value)``.

    The owner is the module or class holding the attribute. For a class attribute the raw
    ``__dict__`` entry is unwrapped from ``staticmethod``/``classmethod``. Modules are imported
    from the shortest prefix on, so a module that exists but fails to import (``No module named
    'cffi'`` raised inside it) is reported as that import error, not as a missing target.

    Raises:
        HookDriftError: the module, class or attribute does not exist.
        HookTargetImportError: a module on the path exists but raised while importing.
    """
    owner_path, _, attr = target.rpartition(".")
    parts = owner_path.split(".")
    owner: Any = None
    walked = 0
    # Import the longest importable module prefix, then walk attributes (classes) from there.
    for i in range(1, len(parts) + 1):
        module = ".".join(parts[:i])
        try:
            owner = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if not _is_missing(err, module):
                raise _import_failed(target, module, err) from err
            break
        except Exception as err:  # an ImportError of a name, an error at import time
            raise _import_failed(target, module, err) from err
        walked = i
    try:
        for name in parts[walked:] if owner is not None else ():
            owner = getattr(owner, name)
    except AttributeError:
        owner = None
    if owner is None or not hasattr(owner, attr):
        raise HookDriftError(
            f"hook target {target} does not exist in the installed sglang; the plugin was "
            f"written for {SUPPORTED_RANGE}. Fix: install a supported sglang, or update "
            f"sglang-integration for this release."
        )
    value = getattr(owner, attr)
    if isinstance(owner, type):
        raw = owner.__dict__.get(attr)
        if isinstance(raw, (staticmethod, classmethod)):
            value = raw.__func__
    return owner, attr, value


def _is_missing(err: ModuleNotFoundError, module: str) -> bool:
    """Whether ``err`` says ``module`` itself (or a package above it) is absent, rather than
    that something ``module`` imports is."""
    return err.name is not None and (err.name == module or module.startswith(err.name + "."))


def _import_failed(target: str, module: str, err: BaseException) -> HookTargetImportError:
    cause = " ".join(f"{type(err).__name__}: {err}".split())
    if isinstance(err, ModuleNotFoundError) and err.name:
        fix = (
            f"install the missing module {err.name!r} (SGLang imports it there), e.g. reinstall "
            f"sglang with its dependencies"
        )
    else:
        fix = f"make 'python -c \"import {module}\"' succeed (the failure is in that import)"
    return HookTargetImportError(
        f"hook target {target} could not be checked: importing {module} failed with {cause}. "
        f"Fix: {fix}."
    )


def check_requires(spec: HookSpec) -> None:
    """Import every ``module:attribute`` in ``spec.requires``.

    Raises:
        HookDriftError: one is missing, naming the distribution to upgrade.
    """
    for req in spec.requires:
        module, _, attr = req.partition(":")
        try:
            ok = hasattr(importlib.import_module(module), attr)
        except ImportError:
            ok = False
        if not ok:
            dist = module.split(".")[0].replace("_", "-")
            raise HookDriftError(
                f"hook {spec.name!r} calls {module}.{attr}, which the installed {dist} does not "
                f"provide. Fix: install the {dist} release that ships with this sglang-integration "
                f"(pip install -U {dist}), or set CPKV_DISABLE_HOOKS={spec.name}."
            )


def check_target(spec: HookSpec) -> Any:
    """Check ``spec.requires``, resolve ``spec.target`` and compare its signature to ``params``.

    Returns:
        The target's current value.

    Raises:
        HookDriftError: a requirement or the target is missing, the target is not callable, or
            its parameters changed.
        HookTargetImportError: the target's module raised while importing.
    """
    check_requires(spec)
    _, _, value = resolve_target(spec.target)
    if not callable(value):
        raise HookDriftError(
            f"hook target {spec.target} is a {type(value).__name__}, not a function; the "
            f"{spec.name} hook cannot wrap it. Fix: install sglang in {SUPPORTED_RANGE}."
        )
    actual = signature_of(value)
    if actual != spec.params:
        raise HookDriftError(
            f"hook {spec.name!r}: {spec.target} has signature ({', '.join(actual)}) but the hook "
            f"was written for ({', '.join(spec.params)}); refusing to patch a function whose "
            f"arguments changed. Fix: install sglang in {SUPPORTED_RANGE}, or update "
            f"sglang-integration for this release."
        )
    return value


def register(spec: HookSpec) -> Any:
    """Check ``spec``'s target and register its hook with SGLang's ``HookRegistry``.

    The registry applies it at ``HookRegistry.apply_hooks()`` (called by ``load_plugins()``).

    Returns:
        The object registered (for a lazy spec, what its loader returned), so the plugin can
        check after ``apply_hooks`` that the target now calls it (``plugin._applied``).
    """
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    check_target(spec)
    hook = spec.hook() if spec.lazy else spec.hook
    HookRegistry.register(spec.target, hook, HookType[spec.kind.upper()])
    return hook
