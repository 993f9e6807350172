"""Checks of the repository's Markdown: relative links resolve, documented commands exist.

Run through `scripts/check-doc-links`; the modules say what each check reads and skips.
"""

from ._check import DocumentedCommand, Problem, check_markdown, documented_commands
from ._environment import (
    ALLOWED_EXTERNAL,
    ALLOWED_EXTERNAL_MODULES,
    BASE_SYSTEM_DIRS,
    THIRD_PARTY_SUBCOMMAND_CLIS,
    HelpPage,
    LockedEnvironment,
)
from ._help import listed_subcommands
from ._links import broken_links
from ._markdown import SHELL_TAGS, CodeBlock, code_blocks
from ._shell import Op, Word, lex, split_commands

__all__ = [
    "ALLOWED_EXTERNAL",
    "ALLOWED_EXTERNAL_MODULES",
    "BASE_SYSTEM_DIRS",
    "SHELL_TAGS",
    "THIRD_PARTY_SUBCOMMAND_CLIS",
    "CodeBlock",
    "DocumentedCommand",
    "HelpPage",
    "LockedEnvironment",
    "Op",
    "Problem",
    "Word",
    "broken_links",
    "check_markdown",
    "code_blocks",
    "documented_commands",
    "lex",
    "listed_subcommands",
    "split_commands",
]
