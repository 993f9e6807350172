"""Backend registry and dispatch: ``cuda > triton > torch`` by availability and tensor device.

Backends beyond torch arrive through the entry-point group ``cpkv_runtime.backends`` (each entry
point is a zero-argument callable returning a :class:`Backend`), discovered lazily on the first
dispatch and only once. Environment variables, read on every call:

- ``CPKV_BACKEND``: ``auto`` (default) | ``torch`` | ``triton`` | ``cuda``. A forced backend that
  cannot run an op on the tensors' device falls back to the automatic choice with one warning
  that says why. The per-call ``backend=`` argument of every public op overrides it.
- ``CPKV_EXTRA_BACKENDS``: comma-separated ``module:callable`` specs loaded like entry points,
  for installs without package metadata (``PYTHONPATH=...`` checkouts). Unset by default.

Both are declared, and parsed, in ``cpkv_cli.environment`` (what a command checks at its start).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points

import torch
from cpkv_cli.environment import CPKV_BACKEND, CPKV_EXTRA_BACKENDS

from ._backend import OP_NAMES, PRIORITY, Backend
from ._torch_ops import TORCH_BACKEND
from .errors import BackendWarning, LayoutError

__all__ = ["Registry", "available_backends", "dispatch", "register_backend", "resolve"]

GROUP = "cpkv_runtime.backends"
CHOICES = ("auto", *PRIORITY)
_OPS = frozenset(OP_NAMES)


def _warn(message: str) -> None:
    """Warn with the caller's frame: the first one outside this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 2  # level 1 is this function
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, BackendWarning, stacklevel=level)


def _entry_points_from_env() -> list[EntryPoint]:
    """``CPKV_EXTRA_BACKENDS`` as entry points; a malformed value is skipped with one warning,
    as a failing entry point is (a command refuses it at start instead)."""
    try:
        specs = CPKV_EXTRA_BACKENDS.read()
    except ValueError as exc:
        _warn(f"cpkv_runtime: {exc}; no extra backend is loaded")
        return []
    return [EntryPoint(name=s.rpartition(":")[2], value=s, group=GROUP) for s in specs]


class Registry:
    """Named backends plus the lazy, once-only entry-point discovery.

    Args:
        entry_points: where to discover backends; ``None`` = the installed ``cpkv_runtime.backends``
            entry points plus ``CPKV_EXTRA_BACKENDS``.
    """

    def __init__(self, entry_points: Iterable[EntryPoint] | None = None) -> None:
        self._backends: dict[str, Backend] = {TORCH_BACKEND.name: TORCH_BACKEND}
        self._entry_points = None if entry_points is None else list(entry_points)
        self._discovered = False
        self._lock = threading.RLock()  # a backend factory may call back in
        self._warned: set[tuple[str, str]] = set()
        # (op, device type) -> the automatic choice: dispatch runs once per op call, and the
        # per-forward path counts microseconds. Cleared whenever the set of backends changes.
        self._auto_choice: dict[tuple[str, str], Backend] = {}

    def register(self, backend: Backend) -> None:
        """Add or replace a backend under ``backend.name``."""
        if not isinstance(backend, Backend):
            raise TypeError(f"register expects a cpkv_runtime.Backend, got {type(backend)!r}")
        unknown = sorted((set(backend.ops) | set(backend.raw_ops)) - set(OP_NAMES))
        if unknown:
            raise LayoutError(
                f"backend {backend.name!r} implements unknown ops {unknown}; known: {OP_NAMES}"
            )
        self._backends[backend.name] = backend
        self._auto_choice.clear()

    def discover(self) -> None:
        """Load every entry point once; a failing one is skipped with one warning naming why."""
        if self._discovered:  # every dispatch comes here: no lock once discovery is done
            return
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            eps = self._entry_points
            if eps is None:
                eps = [*entry_points(group=GROUP), *_entry_points_from_env()]
            for ep in eps:
                try:
                    backend = ep.load()()
                    self.register(backend)
                except Exception as exc:  # one broken plugin must not break the runtime
                    _warn(
                        f"cpkv_runtime: backend entry point {ep.name!r} ({ep.value}) failed to "
                        f"load and is skipped: {type(exc).__name__}: {exc}"
                    )

    def backends(self) -> dict[str, Backend]:
        """All registered backends by name (after discovery)."""
        self.discover()
        return dict(self._backends)

    def resolve(self, op: str, device: torch.device, backend: str | None = None) -> Backend:
        """The backend that runs ``op`` on ``device``, forced (``backend``, env) or automatic.

        Raises:
            LayoutError: unknown op or backend name.
        """
        if op not in _OPS:
            raise LayoutError(f"unknown op {op!r}; ops are {OP_NAMES}")
        if backend is None:
            source, wanted = "CPKV_BACKEND=", CPKV_BACKEND.read(error=LayoutError)
        else:
            source, wanted = "backend=", (backend or "auto").strip().lower()
            if wanted not in CHOICES:
                raise LayoutError(
                    f"backend={wanted!r} is not a backend; choose one of {CHOICES} (auto = "
                    f"{' > '.join(PRIORITY)} by availability)"
                )
        if wanted == TORCH_BACKEND.name:  # always here, runs everywhere: no plugin import needed
            return TORCH_BACKEND
        self.discover()
        if wanted != "auto":
            chosen = self._backends.get(wanted)
            if chosen is not None and chosen.supports(op, device):
                return chosen
            fallback = self._auto(op, device)
            self._warn_fallback(source + wanted, self._why(wanted, op, device), fallback.name)
            return fallback
        return self._auto(op, device)

    def _auto(self, op: str, device: torch.device) -> Backend:
        key = (op, device.type)
        chosen = self._auto_choice.get(key)
        if chosen is None:
            chosen = next(
                (
                    b
                    for b in map(self._backends.get, PRIORITY)
                    if b is not None and b.supports(op, device)
                ),
                TORCH_BACKEND,
            )
            self._auto_choice[key] = chosen
        return chosen

    def _why(self, name: str, op: str, device: torch.device) -> str:
        chosen = self._backends.get(name)
        if chosen is None:
            return f"no {name!r} backend is registered (is cpkv-kernels installed?)"
        if not chosen.available:
            return f"{name} is unavailable: {chosen.reason or 'no reason given'}"
        if device.type not in chosen.devices:
            return (
                f"{name} does not run on {device.type} tensors (runs on {sorted(chosen.devices)})"
            )
        return f"{name} does not implement {op}"

    def _warn_fallback(self, forced: str, why: str, fallback: str) -> None:
        key = (forced, why)
        if key in self._warned:
            return
        self._warned.add(key)
        _warn(f"cpkv_runtime: {forced} was requested but {why}; using {fallback} instead")


_REGISTRY = Registry()


def register_backend(backend: Backend) -> None:
    """Register (or replace) a backend by name in the process-wide registry.

    Entry points do this automatically; call it for a backend built at run time.
    """
    _REGISTRY.register(backend)


def available_backends() -> dict[str, Backend]:
    """The process-wide backends by name (runs entry-point discovery on first use)."""
    return _REGISTRY.backends()


def resolve(op: str, device: torch.device, backend: str | None = None) -> Backend:
    """The backend the process-wide registry picks for ``op`` on ``device`` (``backend=``, else
    ``CPKV_BACKEND``, else ``cuda > triton > torch``), as every op call would.

    For a caller that launches one op many times on inputs it validated once (a per-layer loop):
    resolve once, then call ``backend.ops[op]`` with the signature documented in ``_backend``.
    """
    return _REGISTRY.resolve(op, device, backend)


def dispatch(op: str, device: torch.device, backend: str | None) -> Callable[..., object]:
    """The callable implementing ``op`` for tensors on ``device``."""
    return _REGISTRY.resolve(op, device, backend).ops[op]
