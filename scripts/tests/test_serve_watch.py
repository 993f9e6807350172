"""``scripts/serve/watch.py``: a busy process shows up as the busiest, with its real CPU share,
and py-spy (the release the carry brings, from the dev environment) dumps the stack of a matching
Python process. Real processes and the real py-spy binary; only nvidia-smi is absent here."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "watch.py"
PY_SPY = Path(sys.executable).parent / "py-spy"

SPINNER = """
import sys
def sglang_fake_scheduler_loop():
    while True:
        sum(range(1000))
sglang_fake_scheduler_loop()
"""


def load(source_edit: tuple[str, str] | None = None):
    """The script as a module; `source_edit` plants a bug (old, new) for the mutation checks."""
    text = SCRIPT.read_text()
    if source_edit:
        assert source_edit[0] in text, source_edit[0]
        text = text.replace(*source_edit)
    spec = importlib.util.spec_from_loader("watch_under_test", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(text, str(SCRIPT), "exec"), module.__dict__)
    return module


@pytest.fixture
def spinner():
    proc = subprocess.Popen([sys.executable, "-c", SPINNER, "cpkv-watch-spinner"])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def spinner_share(watch, pid: int) -> tuple[bool, float]:
    """(the spinner is the busiest process, its CPU %) over half a second."""
    before = watch.cpu_ticks()
    time.sleep(0.5)
    lines = watch.busiest(before, watch.cpu_ticks(), 0.5, top=5)
    if not lines:
        return False, 0.0
    first = lines[0].split()
    return int(first[0]) == pid, float(first[1].rstrip("%"))


def test_busiest_names_the_spinning_process_with_its_cpu_share(spinner):
    is_first, share = spinner_share(load(), spinner.pid)
    assert is_first
    assert 50 <= share <= 110  # one core, sampled over 0.5 s at 100 ticks a second


@pytest.mark.parametrize(
    "planted",
    [
        # children's times (cutime, cstime) instead of the process's own
        ("int(fields[11]) + int(fields[12])", "int(fields[13]) + int(fields[14])"),
        # the least busy first
        ("for p in after), reverse=True)", "for p in after))"),
    ],
    ids=["children-times", "ascending"],
)
def test_mutations_are_caught(spinner, planted):
    is_first, share = spinner_share(load(planted), spinner.pid)
    assert not (is_first and 50 <= share <= 110)


@pytest.mark.skipif(not PY_SPY.exists(), reason="py-spy is in the dev environment (uv sync)")
def test_run_until_sigterm_writes_samples_and_the_matching_stack(spinner, tmp_path):
    out = tmp_path / "watch"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            str(out),
            "--every",
            "0.5",
            "--stacks-every",
            "0.5",
            "--py-spy",
            str(PY_SPY),
            "--match",
            "cpkv-watch-spinner",
        ]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stacks = (out / "stacks.log").read_text() if (out / "stacks.log").exists() else ""
        if "sglang_fake_scheduler_loop" in stacks:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert "sglang_fake_scheduler_loop" in stacks, stacks
    assert f"--- pid {spinner.pid}:" in stacks
    samples = (out / "processes.log").read_text()
    assert samples.startswith("=== ") and "gpu: " in samples
    assert str(spinner.pid) in samples


def test_unwritable_outdir_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = subprocess.run(
        [sys.executable, str(SCRIPT), str(blocker / "sub"), "--for", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("watch: cannot write")


def test_stops_after_for_without_py_spy(tmp_path):
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--every", "0.3", "--for", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 10
    assert (tmp_path / "stacks.log").read_text() == "no py-spy given: no stacks\n"
    assert (tmp_path / "processes.log").read_text().count("=== ") == 2
    assert os.path.getsize(tmp_path / "processes.log") > 0
