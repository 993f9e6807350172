"""``cpkv_cli`` in-process: each convention, and the public surface."""

from __future__ import annotations

import os
import subprocess
import sys

import cpkv_cli
import pytest
from cpkv_cli import InputError, OneLineParser, OutputError, emit, refuse, run
from hostile_cli import run_command_into_closed_pipe


def test_every_public_name_imports_and_is_documented():
    for name in cpkv_cli.__all__:
        assert getattr(cpkv_cli, name).__doc__, name


def test_a_usage_error_is_one_line_pointing_at_the_help_flag(capsys):
    parser = OneLineParser(prog="tool", help_flag="--tool-help")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--n", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "tool: error: argument --n: invalid int value: 'x'; see 'tool --tool-help'\n"


def test_sub_parsers_keep_the_convention(capsys):
    parser = OneLineParser(prog="tool")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run").add_argument("--k", type=int, required=True)
    with pytest.raises(SystemExit):
        parser.parse_args(["run"])
    err = capsys.readouterr().err
    assert err == (
        "tool run: error: the following arguments are required: --k; see 'tool run --help'\n"
    )


def test_a_message_of_several_lines_is_one(capsys):
    assert refuse("tool", InputError("first\n  second.\n")) == 2
    assert capsys.readouterr().err == "tool: error: first second.\n"


def test_run_reports_input_and_package_errors_in_one_line(capsys):
    class OwnError(Exception):
        pass

    def body() -> int:
        raise OwnError("bad\nconfig")

    assert run("tool", body, errors=(OwnError,)) == 2
    assert capsys.readouterr().err == "tool: error: bad config\n"
    with pytest.raises(OwnError):
        run("tool", body)  # not declared: a bug, shown as one


def test_run_turns_ctrl_c_into_one_line_and_130(capsys):
    def body() -> int:
        raise KeyboardInterrupt

    assert run("tool", body, interrupted=lambda: "; out.json left as it was") == 130
    assert capsys.readouterr().err == "tool: interrupted; out.json left as it was\n"


def test_run_keeps_the_bodys_status():
    assert run("tool", lambda: 1) == 1


def test_a_broken_pipe_that_is_not_stdouts_propagates():
    def server_socket_died() -> int:
        raise BrokenPipeError("a client went away")

    with pytest.raises(BrokenPipeError):
        run("tool", server_socket_died)
    with pytest.raises(BrokenPipeError), cpkv_cli.quiet_stdout():  # stdout's reader is still there
        server_socket_died()


def test_emit_without_stdout_is_an_output_error(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(OutputError, match="stdout is closed"):
        emit("x")


def test_a_full_disk_is_one_line_and_exit_2():
    code = "import sys; from cpkv_cli import emit, run; sys.exit(run('tool', lambda: emit('x')))"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("tool: error: cannot write the output to stdout (No space left")
    assert proc.stderr.count("\n") == 1


def test_a_plain_print_into_a_full_disk_is_one_line_and_exit_2():
    """A short ``print`` stays in the buffer until ``run``'s last flush, which fails: one line
    and exit 2 (before: a traceback and exit 1, the code some commands give a finding). Output
    buffered, as by default: with ``PYTHONUNBUFFERED`` the ``print`` itself fails, inside the
    command, which writes its output through :func:`emit` for that."""
    code = "import sys; from cpkv_cli import run; sys.exit(run('tool', lambda: print('x') or 0))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=60, check=False, env=env,
        )  # fmt: skip
    assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr
    assert proc.stderr.startswith("tool: error: cannot write the output to stdout (No space left")


_CLOSED_PIPE = """
import sys
from cpkv_cli import QuietStdout, emit, run
def body():
    for i in range(10000):
        emit(f"line {i}")
    QuietStdout().write("more\\n")
    return 3
sys.exit(run("tool", body))
"""


def test_a_closed_stdout_ends_the_output_quietly_and_keeps_the_status():
    proc = run_command_into_closed_pipe([sys.executable, "-c", _CLOSED_PIPE], timeout=60)
    assert (proc.returncode, proc.stderr) == (3, "")


def test_closed_stdout_check_is_stdouts_own():
    """A BrokenPipeError that is not stdout's (a server socket) is not swallowed."""
    from cpkv_cli import quiet_on_closed_stdout

    def server_socket_died() -> int:
        raise BrokenPipeError("a client went away")

    with pytest.raises(BrokenPipeError):
        quiet_on_closed_stdout(server_socket_died)


def test_stdout_to_a_live_pipe_is_not_taken_for_closed():
    code = "from cpkv_cli import stdout_reader_gone as g; print(g())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == "False\n"
