"""scripts/test-all counts every step, the ones it runs in the background too.

``uv`` is replaced (``UV=``) by a script that answers every command at once with a pytest-like
summary line, and fails the commands a test names: the point is test-all's own bookkeeping (exit
codes, pytest's exit 5, the order of the output, each suite run once, Ctrl-C reaching the
background steps' processes), not the suites.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(
    tmp_path: Path, fail: dict[str, int], script: Path = ROOT / "scripts" / "test-all"
) -> tuple[int, str, list[str]]:
    calls = tmp_path / "calls"
    cases = "".join(f'  *"{word}"*) echo "no luck"; exit {code};;\n' for word, code in fail.items())
    fake = tmp_path / "uv"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{calls}"\n'
        # a step whose processes ignore SIGINT (a script's background job, left as bash starts
        # it) would pass its Ctrl-C tests' commands an ignored Ctrl-C: exit 9
        "python3 -c 'import signal, sys; "
        "sys.exit(signal.getsignal(signal.SIGINT) is not signal.default_int_handler)' || exit 9\n"
        'case "$*" in\n'
        f"{cases}"
        "esac\n"
        'echo "1 passed in 0.01s ($*)"\n'
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["env", "--default-signal=INT", "bash", str(script)],  # as a terminal starts it
        capture_output=True,
        text=True,
        env={**os.environ, "UV": str(fake)},
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr, calls.read_text().splitlines()


def _mutant_tree(tmp_path: Path, script: str) -> Path:
    """A tree with two packages and ``script`` as its scripts/test-all."""
    tree = tmp_path / "tree"
    for folder in ("scripts", "packages/indexcache/tests", "packages/sglang-integration/tests"):
        (tree / folder).mkdir(parents=True)
    (tree / "scripts" / "test-all").write_text(script)
    return tree / "scripts" / "test-all"


def test_every_step_runs_once_and_background_output_comes_after(tmp_path: Path):
    code, out, calls = _run(tmp_path, {})
    assert code == 0, out
    assert out.rstrip().endswith("::: all steps passed")
    suites = [c for c in calls if "pytest packages/sglang-integration/tests" in c]
    assert len(suites) == 1, calls  # in the background only, not again in the loop
    assert sum("scripts/sglang-range" in c for c in calls) == 1
    # the background suite's output is printed after the last foreground step
    suite_summary = out.index("s (run --frozen pytest packages/sglang-integration/tests")
    assert suite_summary > out.index("transformers==5.8.1")
    passed = int(out.split("total: ")[1].split(" passed")[0])
    assert passed == len(calls)  # every step's summary line counted, the background ones too


def test_a_background_suite_that_collects_nothing_fails_the_run(tmp_path: Path):
    code, out, _ = _run(tmp_path, {"pytest packages/sglang-integration/tests": 5})
    assert code == 1
    assert "::: sglang-integration: pytest collected no tests (exit 5)" in out
    assert "::: FAILED: sglang-integration (exit 5)" in out


def test_a_failing_background_range_and_foreground_step_both_fail_the_run(tmp_path: Path):
    code, out, _ = _run(tmp_path, {"scripts/sglang-range": 1, "pytest packages/indexcache": 1})
    assert code == 1
    assert "::: FAILED: indexcache (exit 1)" in out
    assert "::: FAILED: sglang-range (exit 1)" in out


def test_the_checks_above_catch_a_background_failure_left_uncounted(tmp_path: Path):
    """Planted bug: test-all without the background steps' failure bookkeeping passes a suite
    that collected nothing, which the exit-5 test above must then see."""
    good = (ROOT / "scripts" / "test-all").read_text()
    bookkeeping = (
        '  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")\ndone\n'  # the background loop's
    )
    assert good.count(bookkeeping) == 1
    mutant = _mutant_tree(tmp_path, good.replace(bookkeeping, "done\n"))
    code, out, _ = _run(tmp_path, {"pytest packages/sglang-integration/tests": 5}, mutant)
    assert code == 0 and "::: all steps passed" in out  # the mutant hides it


def test_the_checks_above_catch_a_background_step_that_ignores_ctrl_c(tmp_path: Path):
    """Planted bug: background steps started as bash starts them, with SIGINT ignored."""
    good = (ROOT / "scripts" / "test-all").read_text()
    assert good.count("env --default-signal=INT ") == 1
    mutant = _mutant_tree(tmp_path, good.replace("env --default-signal=INT ", ""))
    code, out, _ = _run(tmp_path, {}, mutant)
    assert code == 1 and "::: FAILED: sglang-integration (exit 9)" in out
