"""An ``argparse`` parser: usage errors in one line, a ``--help`` that survives ``| head``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from cpkv_cli._messages import one_line
from cpkv_cli._stdout import emit
from cpkv_cli.environment import EnvVar, environment_help


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, ``prog: error: ...; see 'prog --help'``,
    with exit status 2 (argparse's own prints the whole usage first), and whose help goes through
    :func:`~cpkv_cli.emit`, so a reader that closed stdout early ends it quietly.

    Args:
        help_flag: the flag the error line points at (``cpkv-serve`` has ``--cpkv-help`` for
            its own flags, its ``--help`` being SGLang's too). Sub-parsers inherit it.
        environment: the environment variables the command reads (``cpkv_cli.environment``),
            listed after the epilog as they are, not re-wrapped. Sub-parsers inherit them.
    """

    def __init__(
        self,
        *args: Any,
        help_flag: str = "--help",
        environment: Sequence[EnvVar[Any]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.help_flag = help_flag
        self.environment = tuple(environment)

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", type(self))
        action = super().add_subparsers(**kwargs)
        add_parser = action.add_parser

        def add(name: str, **sub_kwargs: Any) -> Any:
            sub_kwargs.setdefault("help_flag", self.help_flag)
            sub_kwargs.setdefault("environment", self.environment)
            return add_parser(name, **sub_kwargs)

        action.add_parser = add
        return action

    def error(self, message: str) -> NoReturn:
        text = one_line(message).rstrip(".")
        self.exit(2, f"{self.prog}: error: {text}; see '{self.prog} {self.help_flag}'\n")

    def format_help(self) -> str:
        section = environment_help(self.environment)
        return super().format_help() + (f"\n{section}\n" if section else "")

    def print_help(self, file: IO[str] | None = None) -> None:
        if file is None or file is sys.stdout:
            emit(self.format_help().rstrip("\n"))
        else:
            super().print_help(file)
