"""Exceptions raised by govctl.

GovctlError(Exception)            exit status 1 unless a subclass says otherwise
├── UsageError                    exit 2: bad arguments, unknown ID, no gov/ found, bad config
├── LifecycleError                exit 1: a `work move` gate refused the transition
└── WriteRefused                  exit 1: the rewritten file would fail `govctl check`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from govctl._diagnostics import Diagnostic


class GovctlError(Exception):
    """Base class; `exit_code` is what the CLI returns when this escapes a command."""

    exit_code = 1


class UsageError(GovctlError):
    """The command line or the repository layout is wrong (exit status 2)."""

    exit_code = 2


class LifecycleError(GovctlError):
    """A status transition is not allowed or its gate is not met."""


class WriteRefused(GovctlError):
    """A mutation would introduce `check` errors; the file on disk was left untouched.

    Attributes:
        diagnostics: the new error diagnostics the mutation would have introduced.
    """

    def __init__(self, message: str, diagnostics: list[Diagnostic]) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics
