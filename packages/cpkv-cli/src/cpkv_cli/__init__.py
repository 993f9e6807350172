"""The conventions every cpkv console script keeps, written once.

Usage errors are one line and exit 2 (:class:`OneLineParser`); any other bad input is one line
naming it and the fix, exit 2 (:class:`InputError`, :func:`refuse`); a reader that closes stdout
early ends the output quietly (:func:`emit`, :func:`quiet_stdout`); Ctrl-C is one line and exit
130, without a traceback (:func:`run`, which applies all of them to a command's body). Checks of
a package's own inputs (URLs, config files, model paths) stay in that package.
"""

# Running a command
from cpkv_cli._messages import InputError, OutputError, one_line, printable, refuse

# Parsing
from cpkv_cli._parser import OneLineParser
from cpkv_cli._run import run

# Output
from cpkv_cli._stdout import (
    QuietStdout,
    drop_stdout,
    emit,
    quiet_on_closed_stdout,
    quiet_stdout,
    stdout_reader_gone,
)

__all__ = [  # noqa: RUF022 (grouped by topic, house style)
    # Running a command
    "run",
    "refuse",
    "one_line",
    "printable",
    # Parsing
    "OneLineParser",
    # Output
    "emit",
    "QuietStdout",
    "quiet_stdout",
    "quiet_on_closed_stdout",
    "stdout_reader_gone",
    "drop_stdout",
    # Errors
    "InputError",
    "OutputError",
]
