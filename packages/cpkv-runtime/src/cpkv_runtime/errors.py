"""Errors and warnings of the cpkv runtime.

::

    Exception
     └── CpkvError                      every error raised on purpose by cpkv
          ├── LayoutError(ValueError)   bad input, caught before any work is launched
          ├── InvariantError(RuntimeError)  a result broke invariant 1 or 2 (CPKV_DEBUG=1)
          └── BuildError(RuntimeError)  a backend could not build its kernels
    UserWarning
     └── BackendWarning                 a backend failed to load or a forced one is unavailable
"""

from __future__ import annotations

__all__ = ["BackendWarning", "BuildError", "CpkvError", "InvariantError", "LayoutError"]


class CpkvError(Exception):
    """Base class of every error cpkv raises on purpose."""


class LayoutError(CpkvError, ValueError):
    """Invalid input: the message names the tensor, the expected and actual value, and the fix."""


class InvariantError(CpkvError, RuntimeError):
    """A result violates invariant 1 (right rows) or 2 (one owner per written slot).

    Raised by :func:`cpkv_runtime.check_invariants`, which ``CPKV_DEBUG=1`` runs after every op.
    """


class BuildError(CpkvError, RuntimeError):
    """A backend failed to build or load its kernels (backends fall back and warn instead)."""


class BackendWarning(UserWarning):
    """A backend entry point failed to load, or a forced backend is unavailable (fell back)."""
