"""An ``argparse`` parser: usage errors in one line, a ``--help`` that survives ``| head``."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any, NoReturn

from cpkv_cli._messages import one_line
from cpkv_cli._stdout import emit


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, ``prog: error: ...; see 'prog --help'``,
    with exit status 2 (argparse's own prints the whole usage first), and whose help goes through
    :func:`~cpkv_cli.emit`, so a reader that closed stdout early ends it quietly.

    Args:
        help_flag: the flag the error line points at (``cpkv-serve`` has ``--cpkv-help`` for
            its own flags, its ``--help`` being SGLang's too). Sub-parsers inherit it.
    """

    def __init__(self, *args: Any, help_flag: str = "--help", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_flag = help_flag

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", type(self))
        action = super().add_subparsers(**kwargs)
        add_parser = action.add_parser

        def add(name: str, **sub_kwargs: Any) -> Any:
            sub_kwargs.setdefault("help_flag", self.help_flag)
            return add_parser(name, **sub_kwargs)

        action.add_parser = add
        return action

    def error(self, message: str) -> NoReturn:
        text = one_line(message).rstrip(".")
        self.exit(2, f"{self.prog}: error: {text}; see '{self.prog} {self.help_flag}'\n")

    def print_help(self, file: IO[str] | None = None) -> None:
        if file is None or file is sys.stdout:
            emit(self.format_help().rstrip("\n"))
        else:
            super().print_help(file)
