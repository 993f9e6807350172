"""govctl: validate and author governance work items (TOML, upstream-govctl compatible)."""

from govctl._checker import Checker
from govctl._diagnostics import CODES, CheckResult, Diagnostic
from govctl._reporters import REPORTERS
from govctl.cli import ParseResult, execute, main
from govctl.errors import GovctlError, LifecycleError, UsageError, WriteRefused

__all__ = [  # noqa: RUF022 -- grouped by topic, as the house style asks
    # Checking
    "CODES",
    "REPORTERS",
    "CheckResult",
    "Checker",
    "Diagnostic",
    # Command line
    "ParseResult",
    "execute",
    "main",
    # Errors
    "GovctlError",
    "LifecycleError",
    "UsageError",
    "WriteRefused",
]
