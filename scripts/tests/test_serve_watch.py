"""``scripts/serve/watch.py``: a busy process shows up with the CPU share it measured itself,
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
import sys, threading, time
def sglang_fake_scheduler_loop():
    while True:
        sum(range(1000))
threading.Thread(target=sglang_fake_scheduler_loop, daemon=True).start()
for _ in sys.stdin:  # each line asks for the CPU time used so far, the test's own oracle
    print(time.process_time(), flush=True)
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
    with subprocess.Popen(
        [sys.executable, "-c", SPINNER, "cpkv-watch-spinner"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        time.sleep(0.3)
        yield proc
        proc.kill()


def cpu_time(proc: subprocess.Popen) -> float:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def spinner_check(watch, proc: subprocess.Popen) -> tuple[bool, str]:
    """Does `busiest` list processes busiest first, the spinner among them with the CPU share the
    spinner itself measured (time.process_time over the same window)? Other processes may be
    busier (CI runs suites side by side), so the spinner need not come first."""
    own0, before, t0 = cpu_time(proc), watch.cpu_ticks(), time.monotonic()
    time.sleep(1.0)
    after, t1 = watch.cpu_ticks(), time.monotonic()
    own1 = cpu_time(proc)
    expected = 100 * (own1 - own0) / (t1 - t0)
    assert expected > 10, f"the spinner got {expected:.0f}% of a core: too loaded to tell"
    lines = watch.busiest(before, after, t1 - t0, top=10_000)
    shares = [float(line.split()[1].rstrip("%")) for line in lines]
    if shares != sorted(shares, reverse=True):
        return False, f"not busiest first: {shares[:5]}"
    mine = [
        float(line.split()[1].rstrip("%")) for line in lines if int(line.split()[0]) == proc.pid
    ]
    if not mine:
        return False, f"spinner missing (it used {expected:.0f}%)"
    # the oracle's window is a little wider than the ticks' one (the two stdin round trips)
    return abs(mine[0] - expected) <= max(10.0, 0.15 * expected), f"{mine[0]} vs {expected:.1f}"


def test_busiest_gives_the_spinning_process_its_own_cpu_share(spinner):
    ok, why = spinner_check(load(), spinner)
    assert ok, why


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
    ok, _ = spinner_check(load(planted), spinner)
    assert not ok


@pytest.mark.skipif(not PY_SPY.exists(), reason="py-spy is in the dev environment (uv sync)")
def test_run_until_sigterm_writes_samples_and_the_matching_stack(spinner, tmp_path):
    out = tmp_path / "watch"
    argv = ["--every", "0.5", "--stacks-every", "0.5", "--py-spy", str(PY_SPY)]
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), *argv, "--match", "cpkv-watch-spinner"]
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
