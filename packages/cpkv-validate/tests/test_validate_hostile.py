"""``cpkv-validate`` and ``python -m cpkv_validate.refserver`` on hostile input.

Every case asserts exit 2, one line on stderr naming the input (no traceback), empty stdout, no
process spawned (the audit hook refuses any), no child process left, and the directory tree
(hostile files included) unchanged. The size cases also run in a fresh interpreter and assert its
peak RSS stays at an ordinary ``--list-scenarios`` run's: the refusal comes before anything of the
hostile size is built (before the bounds, ``--cp 1000000`` forked 256 ranks and took 19 GB in 40
s). A closed stdout ends the output quietly with the command's own exit status. Ctrl-C ends
every rank, exits 130 with one line and leaves ``--json`` as it was; a write the kernel refuses
leaves the old report.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from _servers import raw_server
from cpkv_cli import InputError as CliInputError
from cpkv_validate import refserver, scenario_names
from cpkv_validate._limits import MAX_CP_CPU
from cpkv_validate._targets import check_url
from cpkv_validate.cli import main
from hostile_cli import (
    TORCH_ADDRESS_SPACE,
    run_in_process,
    run_into_closed_pipe,
    run_measured,
    tree,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

#: The shared harness with each spawn refused as well as recorded: a regression of the ``--cp``
#: bound then fails at its first fork instead of forking a process per rank.
run_cli = functools.partial(run_in_process, refuse_spawns=True)
#: The same in a fresh interpreter, which imports torch: its address space, and spawns watched
#: from ``main`` on (importing torch runs ``ldconfig -p``, not this CLI).
measure_cli = functools.partial(
    run_measured,
    address_space=TORCH_ADDRESS_SPACE,
    refuse_spawns=True,
    spawns_at_import=False,
)

URL = "http://127.0.0.1:9"  # never contacted: every case is refused first

CASES: dict[str, tuple[list[str], str]] = {
    # --cp: bounded by the host before any rank is forked
    "cp_million": (["--cp", "1000000", "--scenario", "tiny_extends"], "--cp must be <= 16 on CPU"),
    "cp_17": (["--cp", "17"], "--cp must be <= 16 on CPU (each rank is a process here"),
    "cp_zero": (["--cp", "0"], "--cp must be >= 1 (1 runs without CP); got 0"),
    "cp_negative": (["--cp", "-4"], "--cp must be >= 1"),
    "cp_word": (["--cp", "two"], "argument --cp: invalid int value: 'two'"),
    "cp_float": (["--cp", "2.0"], "argument --cp: invalid int value: '2.0'"),
    "cp_5000_digits": (["--cp", "9" * 5000], "argument --cp: invalid int value"),
    # --seed
    "seed_negative": (["--seed", "-1"], "--seed must be >= 0"),
    "seed_2_63": (["--seed", str(2**63)], "--seed must be <= 9223372036854775807"),
    "seed_huge": (["--seed", "9" * 400], "got 999999999999... (400 digits)"),
    "seed_float": (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    # http engine counts
    "concurrency_zero": (["--url", URL, "--concurrency", "0"], "--concurrency must be >= 2"),
    "concurrency_one": (
        ["--url", URL, "--concurrency", "1"],
        "--concurrency must be >= 2 (a batch test needs two requests in flight at once",
    ),
    "concurrency_huge": (
        ["--url", URL, "--concurrency", "100000000"],
        "--concurrency must be <= 1024",
    ),
    "requests_one": (["--url", URL, "--requests", "1"], "--requests must be >= 2"),
    "requests_huge": (["--url", URL, "--requests", "10000000000"], "--requests must be <= 4096"),
    "max_tokens_zero": (["--url", URL, "--max-tokens", "0"], "--max-tokens must be >= 1"),
    "max_tokens_huge": (["--url", URL, "--max-tokens", "40000"], "--max-tokens must be <= 32768"),
    "prefix_words_negative": (
        ["--url", URL, "--prefix-words", "-1"],
        "--prefix-words must be >= 0",
    ),
    "prefix_words_huge": (
        ["--url", URL, "--prefix-words", "1000000"],
        "--prefix-words must be <= 100000",
    ),
    "compare_zero": (["--url", URL, "--compare-tokens", "0"], "--compare-tokens must be in 1..--"),
    "compare_over": (
        ["--url", URL, "--max-tokens", "8", "--compare-tokens", "9"],
        "--compare-tokens must be in 1..--max-tokens (8), got 9",
    ),
    "min_compared_zero": (["--url", URL, "--min-compared", "0"], "--min-compared must be >= 1"),
    "min_compared_over": (
        ["--url", URL, "--max-tokens", "4"],
        "--max-tokens 4 is below --min-compared 8 (the fewest tokens compared per request",
    ),
    "min_compared_over_compare": (
        ["--url", URL, "--compare-tokens", "6", "--min-compared", "7"],
        "--compare-tokens 6 is below --min-compared 7",
    ),
    "drift_negative": (["--url", URL, "--drift-epsilon", "-1"], "--drift-epsilon must be a gap"),
    "drift_nan": (["--url", URL, "--drift-epsilon", "nan"], "in [0, 10] (0: every difference"),
    "drift_huge": (["--url", URL, "--drift-epsilon", "11"], "no near-tie), got 11.0"),
    "reply_zero": (["--url", URL, "--max-reply-mib", "0"], "--max-reply-mib must be >= 1"),
    "reply_huge": (["--url", URL, "--max-reply-mib", "4096"], "--max-reply-mib must be <= 1024"),
    "timeout_zero": (["--url", URL, "--timeout", "0"], "--timeout must be a number of seconds in"),
    "timeout_negative": (["--url", URL, "--timeout", "-5"], "got -5.0"),
    "timeout_nan": (["--url", URL, "--timeout", "nan"], "got nan"),
    "timeout_inf": (["--url", URL, "--timeout", "inf"], "got inf"),
    "timeout_day": (["--url", URL, "--timeout", "86400"], "in (0, 3600]"),
    "timeout_word": (["--url", URL, "--timeout", "soon"], "invalid float value: 'soon'"),
    "model_empty": (["--url", URL, "--model", ""], "--model '': give the server's model name"),
    "model_control": (["--url", URL, "--model", "a\x07b"], "give the server's model name"),
    # enums
    "split": (["--split", "diagonal"], "argument --split: invalid choice: 'diagonal'"),
    "allocator": (["--allocator", "buddy"], "argument --allocator: invalid choice: 'buddy'"),
    "inverse": (["--inverse", "value"], "argument --inverse: invalid choice: 'value'"),
    "offsets": (["--sglang-offsets", "0.5.23"], "argument --sglang-offsets: invalid choice"),
    "device": (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    "dtype": (["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    "backend": (["--backend", "numpy"], "argument --backend: invalid choice: 'numpy'"),
    "engine": (["--engine", "grpc"], "argument --engine: invalid choice: 'grpc'"),
    "unknown_flag": (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    # scenarios
    "scenario_unknown": (["--scenario", "nope"], "unknown --scenario 'nope'; choose from shared"),
    "scenario_empty": (["--scenario", ""], "unknown --scenario ''"),
    "scenario_huge": (["--scenario", "x" * 100_000], "unknown --scenario 'xxxxxxxx"),
    # one engine's flags with the other
    "http_without_url": (["--engine", "http"], "--engine http needs --url URL"),
    "url_with_reference": (["--engine", "reference", "--url", URL], "--url is for --engine http"),
    "url_with_inverse": (["--url", URL, "--inverse", "legacy"], "--inverse applies to the ref"),
    "url_with_cp_split": (["--url", URL, "--cp", "2", "--split", "zigzag"], "--cp, --split apply"),
    "url_with_scenario": (["--url", URL, "--scenario", "odd_extends"], "--scenario applies"),
    "url_with_offsets": (["--url", URL, "--sglang-offsets", "fixed"], "--sglang-offsets applies"),
    "url_with_device": (["--url", URL, "--device", "cpu"], "--device applies to the reference"),
    "concurrency_without_url": (["--concurrency", "4"], "--concurrency applies to the http eng"),
    "timeout_without_url": (["--timeout", "5", "--model", "m"], "--model, --timeout apply to"),
    # --url
    "url_ftp": (["--url", "ftp://host"], "--url must start with http:// or https://"),
    "url_no_host": (["--url", "http://"], "names no host"),
    "url_port_huge": (["--url", "http://h:99999"], "Port out of range 0-65535"),
    "url_port_word": (["--url", "http://h:http"], "Port could not be cast to integer"),
    "url_port_zero": (["--url", "http://h:0"], "port 0 cannot be connected to"),
    "url_ipv6_open": (["--url", "http://[::1"], "Invalid IPv6 URL"),
    "url_space": (["--url", "http://exa mple"], "contains whitespace or control characters"),
    "url_newline": (["--url", "http://h:1\nHost: x"], "contains whitespace or control"),
    "url_query": (["--url", "http://h:1/?model=x"], "has a query or fragment"),
    "url_fragment": (["--url", "http://h:1/#v1"], "has a query or fragment"),
    "url_label_64": (["--url", f"http://{'a' * 64}.com"], "is not an IP address or a DNS name"),
    "url_host_300": (["--url", "http://" + "a." * 150 + "com"], "not an IP address or a DNS"),
    "url_host_symbols": (["--url", "http://a$b:1"], "is not an IP address or a DNS name"),
    # --json
    "json_parent_missing": (["--json", "{d}/nope/r.json"], "{d}/nope does not exist"),
    "json_parent_file": (["--json", "{d}/file.txt/r.json"], "{d}/file.txt is not a directory"),
    "json_is_dir": (["--json", "{d}/dir"], "{d}/dir is a directory; give a file path inside it"),
    "json_trailing_slash": (["--json", "{d}/new/"], "give a file path"),
    "json_fifo": (["--json", "{d}/fifo"], "{d}/fifo is not a regular file"),
    "json_in_proc": (["--json", "/proc/r.json"], "cannot create a file in /proc"),
    "json_name_too_long": (["--json", "{d}/" + "r" * 300 + ".json"], "the file name is 305 bytes"),
    "json_empty": (["--json", ""], "--json '': give a file path"),
}
if not torch.cuda.is_available():
    CASES["device_cuda"] = (["--device", "cuda"], "--device cuda: no CUDA device is visible")
    CASES["backend_cuda"] = (["--backend", "cuda"], "--backend cuda is not available here")
    CASES["backend_triton"] = (["--backend", "triton"], "--backend triton is not available here")


HOSTILE_FILES = ["dir", "fifo", "file.txt"]


@pytest.fixture
def hostile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of hostile paths (a file, a directory, a FIFO); also the working directory."""
    (tmp_path / "file.txt").write_text("not a directory\n")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


def _refused(run, message: str, prog: str = "cpkv-validate") -> None:
    assert run.code == 2 and run.out == ""
    assert run.err.count("\n") == 1 and run.err.endswith("\n"), "one line"
    assert run.err.startswith(f"{prog}: error: ") and "Traceback" not in run.err
    assert message in run.err
    assert run.spawns == [] and run.children_after == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_input(hostile_dir, case):
    argv, message = CASES[case]
    before = tree(hostile_dir)
    run = run_cli(main, [*_argv(argv, hostile_dir), "--no-progress"])
    _refused(run, message.replace("{d}", str(hostile_dir)))
    assert tree(hostile_dir) == before


def test_concurrency_is_held_below_the_open_file_limit(hostile_dir):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        run = run_cli(main, ["--url", URL, "--concurrency", "200"])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    _refused(run, "--concurrency 200 needs a socket per request but the open-file limit is 256")


@contextlib.contextmanager
def _server(status: int, body: bytes, content_type: str):
    """A local HTTP server (a thread, not a process) answering every request the same way."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:  # keep the test output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (404, b"<html>no</html>", "text/html", "/v1/models answered HTTP 404 Not Found; is --url"),
        (200, b"<html>hi</html>", "text/html", "/v1/models did not answer JSON (it began b'<html>"),
        (200, b'{"data": 5}', "application/json", "/v1/models did not list models"),
        (200, b"\xff\xfe", "application/json", "did not answer JSON"),
    ],
    ids=["404", "html", "no_list", "not_utf8"],
)
def test_a_server_that_is_not_openai_compatible(hostile_dir, status, body, kind, message):
    before = tree(hostile_dir)
    with _server(status, body, kind) as url:
        run = run_cli(main, ["--url", url, "--json", "out.json", "--no-progress"])
    _refused(run, message)
    assert tree(hostile_dir) == before  # no report, no probe file left


_HTTP_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "/v1/models did not answer valid HTTP (BadStatusLine"),
        (b"", "/v1/models: Remote end closed connection without response"),
        (
            _HTTP_HEAD + b"Content-Length: 100\r\n\r\n" + b'{"data": [',
            "/v1/models did not answer valid HTTP (IncompleteRead",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
            "/v1/models did not answer valid HTTP (LineTooLong",
        ),
        (
            _HTTP_HEAD + b"Content-Length: 200000\r\n\r\n" + b"[" * 200000,
            "/v1/models did not answer JSON (it began b'[[[[",
        ),
    ],
    ids=["not_http", "closed", "short_body", "header_too_long", "nested_json"],
)
def test_a_reply_that_is_not_http_or_is_cut_short(hostile_dir, reply, message):
    """Before: a traceback and exit 1 (the code for contamination) on the first three."""
    with raw_server(reply) as url:
        run = run_cli(main, ["--url", url, "--json", "out.json", "--no-progress"])
    _refused(run, message)
    assert not (hostile_dir / "out.json").exists()


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"text": 5}, "choices[0].text is a int, not a string"),
        ({"text": "a", "logprobs": {"tokens": "ab"}}, "choices[0].logprobs.tokens is not a list"),
        ({"text": "a", "finish_reason": 7}, "choices[0].finish_reason is 7, not a string"),
    ],
    ids=["text_int", "tokens_str", "finish_int"],
)
def test_a_malformed_completion(hostile_dir, choice, message):
    body = json.dumps({"data": [{"id": "m"}], "choices": [choice]}).encode()
    with _server(200, body, "application/json") as url:
        run = run_cli(main, ["--url", url, "--no-progress"])
    _refused(run, f"/v1/completions answered a malformed completion: {message}")


def test_completions_without_choices(hostile_dir):
    with _server(200, b'{"data": [{"id": "m"}], "x": 1}', "application/json") as url:
        run = run_cli(main, ["--url", url, "--no-progress"])
    _refused(run, "/v1/completions answered without choices[0]")


# Resource bounds, measured in a fresh interpreter -------------------------------------------------
RESOURCE_CASES = ["cp_million", "requests_huge", "concurrency_huge", "seed_huge"]


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS (KiB) of an ordinary run that builds nothing: ``--list-scenarios``."""
    tmp = tmp_path_factory.mktemp("baseline")
    run = measure_cli("cpkv_validate.cli", ["--list-scenarios"], tmp)
    assert run.code == 0 and "fresh_prompts_cp4" in run.out and run.spawns == []
    return run.maxrss_kib


@pytest.mark.parametrize("case", RESOURCE_CASES)
def test_hostile_sizes_stay_small(hostile_dir, tmp_path_factory, baseline_rss, case):
    argv, message = CASES[case]
    before = tree(hostile_dir)
    tmp = tmp_path_factory.mktemp("measured")
    run = measure_cli("cpkv_validate.cli", argv, tmp, cwd=hostile_dir)
    assert run.code == 2 and message in run.err and "Traceback" not in run.err
    assert run.spawns == [] and tree(hostile_dir) == before
    assert (
        run.maxrss_kib <= baseline_rss + 8 * 1024
    )  # 8 MiB of slack over a run that builds nothing


def _spawns_once(argv: list[str]) -> int:
    subprocess.run(["true"], check=False)
    return 0


def test_the_harness_refuses_a_spawn(tmp_path):
    """What ``run.spawns == []`` above rests on: under ``run_cli`` and ``measure_cli`` a spawn by
    the CLI is refused (and logged), while torch's own ``ldconfig -p`` at import is let be."""
    with pytest.raises(RuntimeError, match=r"subprocess\.Popen refused"):
        run_cli(_spawns_once, [])
    (tmp_path / "spawns_once.py").write_text(
        "import subprocess\n"
        "import torch  # runs ldconfig -p at import\n\n\n"
        "def main(argv):\n"
        "    print('main ran', flush=True)\n"
        "    subprocess.run(['true'], check=False)\n"
        "    return 0\n"
    )
    run = measure_cli("spawns_once", [], tmp_path, cwd=tmp_path)
    assert run.code == 1 and run.out == "main ran\n" and run.spawns == ["subprocess.Popen"]
    assert "RuntimeError: hostile-input test: subprocess.Popen refused" in run.err


# refserver --------------------------------------------------------------------------------------
REFSERVER_CASES: dict[str, tuple[list[str], str]] = {
    "port_negative": (["--port", "-1"], "--port must be in 0..65535 (0: any free port); got -1"),
    "port_huge": (["--port", "70000"], "--port must be in 0..65535"),
    "port_word": (["--port", "http"], "argument --port: invalid int value: 'http'"),
    "seed_negative": (["--seed", "-2"], "--seed must be in 0..9223372036854775807"),
    "seed_2_63": (["--seed", str(2**63)], "--seed must be in 0..9223372036854775807"),
    "inverse": (["--inverse", "value"], "argument --inverse: invalid choice: 'value'"),
    "allocator": (["--allocator", "buddy"], "argument --allocator: invalid choice: 'buddy'"),
    "unknown_flag": (["--cp", "2"], "unrecognized arguments: --cp 2"),
}
PROG = "python -m cpkv_validate.refserver"


@pytest.mark.parametrize("case", sorted(REFSERVER_CASES))
def test_refserver_hostile_input(hostile_dir, case):
    argv, message = REFSERVER_CASES[case]
    before = tree(hostile_dir)
    _refused(run_cli(refserver.main, argv), message, PROG)
    assert tree(hostile_dir) == before


def test_refserver_refuses_a_taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        run = run_cli(refserver.main, ["--port", str(port)])
    _refused(run, f"--port {port}: cannot listen on 127.0.0.1 (Address already in use)", PROG)


# Pipes ------------------------------------------------------------------------------------------
def _closed_stdout_run(*argv: str) -> subprocess.CompletedProcess:
    return run_into_closed_pipe("cpkv_validate", *argv)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--help"], 0),
        (["--list-scenarios"], 0),
        (["--cp", "1", "--scenario", "tiny_extends", "--allocator", "sglang", "--no-progress"], 0),
        # cp 2 with progress on: stderr is not a terminal here, so a line per scenario run
        (["--cp", "2", "--scenario", "tiny_extends", "--split", "zigzag"], 0),
        (["--cp", "2", "--scenario", "fresh_prompts_cp2", "--sglang-offsets", "upstream"], 1),
    ],
    ids=["help", "list", "cp1_run", "cp2_progress", "cp2_contaminated"],
)
def test_closed_stdout_is_quiet(argv, code):
    proc = _closed_stdout_run(*argv)
    assert proc.returncode == code
    progress = [ln for ln in proc.stderr.splitlines() if re.match(r"cpkv-validate: \d+/2 ", ln)]
    assert proc.stderr == "".join(f"{line}\n" for line in progress)  # nothing but progress
    assert len(progress) == (0 if "--no-progress" in argv or "--cp" not in argv else 2)


def test_closed_stdout_keeps_the_exit_code_of_an_error():
    proc = _closed_stdout_run("--cp", "0")
    assert proc.returncode == 2 and proc.stderr.startswith("cpkv-validate: error: --cp must be")


def test_head_dash_1_is_quiet():
    cmd = f"{sys.executable} -m cpkv_validate --list-scenarios"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{cmd} | head -1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.stdout.startswith("shared_prefix_pages") and proc.stdout.count("\n") == 1
    assert proc.stderr == "" and proc.returncode == 0


def test_refserver_serves_with_a_closed_stdout():
    """The server prints its address once; a closed stdout must not stop it serving."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r, w = os.pipe()
    os.close(r)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cpkv_validate.refserver", "--port", str(port)],
        stdout=w,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    try:
        models = None
        for _ in range(600):  # import and model build take seconds on a busy box
            if proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/v1/models"
                with urllib.request.urlopen(url, timeout=5) as resp:
                    models = resp.read()
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        assert models is not None and b"cpkv-reference" in models
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err


# Random hostile values (hypothesis) beside the fixed table --------------------------------------
@settings(max_examples=40, deadline=None)
@given(cp=st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_CP_CPU + 1)))
def test_any_cp_outside_the_bound_is_refused(cp):
    run = run_cli(main, ["--cp", str(cp), "--no-progress"])
    bound = "--cp must be >= 1" if cp < 1 else f"--cp must be <= {MAX_CP_CPU} on CPU"
    _refused(run, bound)


@settings(max_examples=40, deadline=None)
@given(name=st.text(max_size=80).filter(lambda s: s not in scenario_names()))
def test_any_unknown_scenario_is_refused(name):
    assume("\x00" not in name)  # argv cannot hold NUL
    run = run_cli(main, [f"--scenario={name}", "--no-progress"])  # '-x' too
    _refused(run, "unknown --scenario")


@settings(max_examples=200, deadline=None)
@given(url=st.one_of(st.text(max_size=60), st.from_regex(r"\Ahttps?://[^/]{0,30}(/.{0,10})?\Z")))
def test_check_url_accepts_or_refuses_in_one_line(url):
    """Any text is either a base URL urllib can split, or one line naming --url and the fix."""
    try:
        check_url(url)
    except CliInputError as exc:
        assert "\n" not in str(exc) and "--url" in str(exc) and "e.g. --url http" in str(exc)
    else:
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme in ("http", "https") and parts.hostname and parts.port != 0


# Nothing half-written ---------------------------------------------------------------------------
def test_a_failed_json_write_leaves_the_old_report(hostile_dir, tmp_path_factory):
    """A write the kernel refuses (a file-size limit stands in for a full disk): old file kept."""
    old = hostile_dir / "report.json"
    old.write_text("the previous report\n")
    argv = ["--cp", "1", "--scenario", "tiny_extends", "--allocator", "sglang"]
    run = measure_cli(
        "cpkv_validate.cli",
        [*argv, "--split", "zigzag", "--no-progress", "--json", str(old)],
        tmp_path_factory.mktemp("fsize"),
        cwd=hostile_dir,
        fsize=256,  # well below a report, above the probe file (empty)
        preimport=("torch",),  # imported once the arguments are checked; its ldconfig is not ours
    )
    assert run.code == 2 and "tiny_extends" in run.out, run
    assert run.err.startswith(f"cpkv-validate: error: cannot write --json {old}")
    assert run.err.count("\n") == 1 and "Traceback" not in run.err
    assert old.read_text() == "the previous report\n"
    assert sorted(p.name for p in hostile_dir.iterdir()) == [*HOSTILE_FILES, "report.json"]


def _interrupt_when(proc: subprocess.Popen, ready) -> tuple[int, str]:
    """Send Ctrl-C (SIGINT to the process group, as a terminal does) once ``ready()``."""
    for _ in range(1200):
        if proc.poll() is not None or ready():
            break
        time.sleep(0.25)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_ctrl_c_during_the_ranks_ends_them_and_writes_nothing(hostile_dir):
    old = hostile_dir / "report.json"
    old.write_text("the previous report\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cpkv_validate", "--cp", "2", "--json", str(old), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    ranks: list[int] = []

    def forked() -> bool:
        with contextlib.suppress(OSError):
            ranks[:] = _children(proc.pid)
        return len(ranks) >= 2

    code, err = _interrupt_when(proc, forked)
    assert code == 130 and err == f"cpkv-validate: interrupted; --json {old} left as it was\n"
    assert old.read_text() == "the previous report\n"
    assert sorted(p.name for p in hostile_dir.iterdir()) == [*HOSTILE_FILES, "report.json"]
    for pid in ranks:  # ended, and reaped by the parent
        assert not Path(f"/proc/{pid}").exists()


def test_ctrl_c_while_waiting_on_a_server(hostile_dir):
    asked = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.set()
            time.sleep(30)  # a server that never answers in time

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "cpkv_validate", "--url", url, "--json", "out.json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        code, err = _interrupt_when(proc, asked.is_set)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert code == 130 and err == "cpkv-validate: interrupted; --json out.json left as it was\n"
    assert not (hostile_dir / "out.json").exists()


def test_a_server_that_does_not_answer_times_out(hostile_dir):
    """A listening socket that never answers: ``--timeout`` ends the wait with one line (a
    server that answers a byte at a time: ``test_validate_http_transport``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        run = run_cli(main, ["--url", url, "--timeout", "0.5", "--no-progress"])
    _refused(run, f"{url}/v1/models timed out: no whole answer within --timeout 0.5 s")
