"""``cpkv-validate``'s report can be read and piped, and is never lost quietly.

- ``--json -`` writes the JSON to stdout and the table to stderr (before: a file named ``-``);
  ``--json /dev/stdout`` does the same (before: refused, "not a regular file"). The JSON holds
  each request's marker, its output from every run, the compared tokens and the verdict.
- A report that cannot be written (``> /dev/full``, stdout closed with ``>&-``) is one line and
  exit 2, naming the run's verdict (before: a traceback and exit 1, or nothing and exit 0);
  ``--list-scenarios > /dev/full`` too (before: a traceback and exit 1).
- Progress lines from the batch's threads come out whole (before, at ``--concurrency 16``,
  they interleaved).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from _fakes import Fake, FirstMarkerCache, serve
from cpkv_validate._client import Completion
from cpkv_validate._progress import Lines
from cpkv_validate.cli import main
from hostile_cli import run_in_process

ARGV = ["--concurrency", "4", "--max-tokens", "8", "--no-progress"]


def test_json_dash_writes_json_to_stdout_and_the_table_to_stderr(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with serve(Fake()) as url:
        run = run_in_process(main, ["--url", url, *ARGV, "--json", "-"])
    assert run.code == 0 and not (tmp_path / "-").exists(), run
    report = json.loads(run.out)  # nothing else on stdout
    assert "OK: 4 requests" in run.err and "│ r3 " in run.err
    for r in report["scenarios"][0]["requests"]:
        detail = r["detail"]
        assert re.fullmatch(r"MARK\d\dx[0-9a-f]{4}", r["marker"]) and r["verdict"] == "PASS"
        assert set(detail["outputs"]) == {"reference", "batch", "reference_after"}
        assert detail["outputs"]["reference"] == detail["outputs"]["batch"] != ""
        assert len(detail["compared_tokens"]["batch"]) == r["rows"] == 8


def test_prefix_words_sets_the_shared_prefix_the_server_is_sent(tmp_path, monkeypatch):
    """``--prefix-words N``: every prompt (and the warm-up) starts with the same N-word prefix,
    and the report says N (a DSA model needs one past its top-k for the selection to matter)."""
    monkeypatch.chdir(tmp_path)
    fake = Fake()
    with serve(fake) as url:
        run = run_in_process(main, ["--url", url, *ARGV, "--prefix-words", "700", "--json", "-"])
    assert run.code == 0, run
    assert json.loads(run.out)["config"]["prefix_words"] == 700
    prompts = [p for p in fake.seen if not p.endswith("Warmup request")]
    heads = {" ".join(p.split()[:700]) for p in fake.seen}
    assert len(prompts) == 4 and len(heads) == 1
    assert all(p.split()[700] in ("Request", "Warmup") for p in fake.seen)


def test_the_json_names_a_leak_with_its_text(tmp_path):
    with serve(FirstMarkerCache()) as url:
        run = run_in_process(main, ["--url", url, *ARGV, "--json", "-"])
    assert run.code == 1
    r1 = json.loads(run.out)["scenarios"][0]["requests"][1]
    assert r1["verdict"] == "FAIL" and r1["leak_sources"] == ["r0"]
    found = r1["detail"]["foreign_markers"][0]
    assert found["source"] == "r0" and found["text"] in r1["detail"]["outputs"][found["run"]]


def _cli(url: str, *argv: str, stdout=subprocess.PIPE, shell_redirect: str | None = None):
    cmd = [sys.executable, "-m", "cpkv_validate", "--url", url, *ARGV, *argv]
    if shell_redirect is not None:
        import shlex

        cmd = ["bash", "-c", f"{shlex.join(cmd)} {shell_redirect}"]
    return subprocess.run(
        cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120, check=False
    )


def test_json_dev_stdout_is_stdout():
    with serve(Fake()) as url:
        proc = _cli(url, "--json", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True and "OK: 4 requests" in proc.stderr


@pytest.mark.parametrize("where", ["full", "closed"])
@pytest.mark.parametrize("fake", [Fake, FirstMarkerCache], ids=["pass", "contaminated"])
def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(where, fake):
    redirect = "> /dev/full" if where == "full" else ">&-"
    with serve(fake()) as url:
        proc = _cli(url, shell_redirect=redirect)
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    said = "No space left on device" if where == "full" else "stdout is closed"
    assert proc.stderr.startswith("cpkv-validate: error: ") and said in proc.stderr
    verdict = "no contamination" if fake is Fake else "contamination found"
    assert proc.stderr.endswith(f"(the run's verdict: {verdict})\n")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_list_scenarios_into_a_full_disk_is_one_line_and_exit_2(unbuffered):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:  # print fails at once, inside the command, not at the last flush
        env["PYTHONUNBUFFERED"] = "1"
    cmd = f"{sys.executable} -m cpkv_validate --list-scenarios > /dev/full"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("cpkv-validate: error: cannot write the output to stdout (No")


class _SlowStream:
    """A stream whose every write yields the GIL first: threads that write a line in two
    pieces interleave on it."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.0005)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_progress_lines_from_many_threads_come_out_whole():
    stream, threads_n, each = _SlowStream(), 16, 4
    lines = Lines(threads_n * each, stream)
    run = Completion(" a b", ["a", "b"], "words", None, None, "length")

    def worker(k: int) -> None:
        for _ in range(each):
            lines("batch", f"r{k}", run)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = "".join(stream.parts).splitlines()
    pattern = re.compile(r"cpkv-validate: (\d+)/64 batch r\d+: 2 words \(length\)")
    assert all(pattern.fullmatch(line) for line in text), text
    assert sorted(int(pattern.fullmatch(line)[1]) for line in text) == list(range(1, 65))
