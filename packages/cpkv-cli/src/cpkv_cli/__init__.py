"""The conventions every cpkv console script keeps, written once.

Usage errors are one line and exit 2 (:class:`OneLineParser`); any other bad input is one line
naming it and the fix, exit 2 (:class:`InputError`, :func:`refuse`); a reader that closes stdout
early ends the output quietly (:func:`emit`, :func:`quiet_stdout`); Ctrl-C is one line and exit
130, without a traceback (:func:`run`, which applies all of them to a command's body). A JSON
file a user names is read one way (:func:`read_json_object`: bounded, never blocking on a FIFO,
one line per failure); what a package's inputs must hold (URLs, config fields, model paths)
stays in that package. Environment variables are inputs too: each is declared once in
:mod:`cpkv_cli.environment`, read through its parser, and checked at a command's start
(:func:`check_environment`: one line, exit 2).
"""

# Input files
from cpkv_cli._json_file import MAX_CONFIG_BYTES, read_bounded_file, read_json_object

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

# Input variables
from cpkv_cli.environment import EnvVar, check_environment

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
    # Input files and variables
    "check_environment",
    "EnvVar",
    "read_json_object",
    "read_bounded_file",
    "MAX_CONFIG_BYTES",
    # Errors
    "InputError",
    "OutputError",
]
