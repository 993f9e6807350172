"""``deepgemm-compat`` and ``plan_warmup`` on hostile input: one line, exit 2, nothing else.

Every CLI case asserts the exit code, a one-line stderr with no traceback, empty stdout, no
process spawned (audit hooks, and the live children counted from /proc) and the working
directory unchanged. The resource cases also run in a fresh interpreter and assert its peak RSS
stays at an ordinary run's: the refusal comes before anything of the hostile size is built
(before the bounds, ``--cp 1000000000 --split zigzag`` looped over every rank for minutes). The
library refuses the same sizes with almost nothing allocated, and the largest plan the bounds
allow stays within the stated ``PLAN_BYTES``. A closed stdout ends the output quietly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from deepgemm_compat import InputError
from deepgemm_compat._bounds import MAX_KERNELS, PLAN_BYTES
from deepgemm_compat.cli import main
from deepgemm_compat.warmup import CPSetup, GemmShape, KernelType, glm51_shapes, plan_warmup
from hostile_cli import run_in_process, run_into_closed_pipe, run_measured, tree

DENSE = KernelType.GEMM_NT_F8F8BF16
OFF_RULE = "only -1 turns chunked prefill off: SGLang 0.5.23's scheduler"
CP_RULE = "--cp must be <= 8 (SGLang 0.5.23 runs DSA prefill CP within one 8-GPU node"

# name -> (argv, message, environment); every command, every numeric flag, each combination rule
CASES: dict[str, tuple[list[str], str, dict[str, str]]] = {
    # --chunked: what SGLang refuses or treats two ways
    "chunked_minus_5": (["plan", "--chunked", "-5"], f"--chunked=-5: {OFF_RULE}", {}),
    "chunked_zero": (["plan", "--chunked", "0"], f"--chunked=0: {OFF_RULE}", {}),
    "chunked_minus_2_to_the_63": (["plan", "--chunked", str(-(2**63))], OFF_RULE, {}),
    "chunked_not_a_page_multiple": (
        ["plan", "--chunked", "10000"],
        "--chunked 10000 is not a multiple of 64: SGLang 0.5.23 asserts chunked_prefill_size % "
        "page_size == 0, and DSA models run with page_size 64; fix: --chunked 10048",
        {},
    ),
    "chunked_trillion": (
        ["plan", "--chunked", "1000000000000", "--fast", "--fast-to-chunk"],
        "--chunked must be <= 2,147,483,647 (a chunk's tokens are one GEMM's M",
        {},
    ),
    "chunked_float": (["plan", "--chunked", "8192.0"], "argument --chunked: invalid int value", {}),
    "chunked_5000_digits": (["plan", "--chunked", "9" * 5000], "invalid int value", {}),
    "chunked_missing_value": (
        ["plan", "--chunked"],
        "argument --chunked: expected one argument",
        {},
    ),
    # --cp: SGLang's DSA prefill CP stops at one 8-GPU node
    "cp_zero": (["plan", "--cp", "0"], "--cp must be >= 1, got 0", {}),
    "cp_negative": (["plan", "--cp", "-8"], "--cp must be >= 1, got -8", {}),
    "cp_16": (["plan", "--cp", "16"], f"{CP_RULE}: it asserts tp_size <= 8", {}),
    "cp_billion_zigzag": (
        ["plan", "--cp", "1000000000", "--split", "zigzag"],
        f"{CP_RULE}: it asserts tp_size <= 8 and that --attn-cp-size divides it), got 1000000000",
        {},
    ),
    "cp_word": (["plan", "--cp", "eight"], "argument --cp: invalid int value: 'eight'", {}),
    # the other numbers
    "floor_zero": (["plan", "--floor", "0"], "--floor must be >= 1, got 0", {}),
    "floor_huge": (["plan", "--floor", str(2**31)], "--floor must be <= 2,147,483,647", {}),
    "ep_zero": (["plan", "--ep", "0"], "--ep must be >= 1, got 0", {}),
    "ep_not_a_divisor": (["plan", "--ep", "7"], "--ep must divide 256 (GLM-5.1's 256", {}),
    "ep_over_the_experts": (["plan", "--ep", "512"], "--ep must be <= 256 (GLM-5.1 has 256", {}),
    "attn_tp_not_a_divisor": (["plan", "--attn-tp", "3"], "fix: --attn-tp 2", {}),
    "attn_tp_over_the_heads": (["plan", "--attn-tp", "128"], "--attn-tp must be <= 64", {}),
    "mk_alignment_zero": (["plan", "--mk-alignment", "0"], "--mk-alignment must be >= 1", {}),
    "mk_alignment_huge": (
        ["plan", "--mk-alignment", "4096"],
        "--mk-alignment must be <= 1,024",
        {},
    ),
    # combinations the library would accept and quietly ignore or misread
    "draft_cp_without_draft": (["plan", "--draft-cp"], "--draft-cp says the draft model", {}),
    "fast_to_chunk_without_fast": (["plan", "--fast-to-chunk"], "it needs --fast", {}),
    # choices and syntax
    "split_ring": (["plan", "--split", "ring"], "argument --split: invalid choice: 'ring'", {}),
    "shapes_unknown": (["plan", "--shapes", "glm6"], "argument --shapes: invalid choice", {}),
    "m_list_unknown": (["plan", "--m-list", "upstream"], "invalid choice: 'upstream'", {}),
    "m_list_env_unknown": (
        ["plan"],
        "DEEPGEMM_COMPAT_M_LIST='upstream': expected auto, sglang or copy; or unset it (auto)",
        {"DEEPGEMM_COMPAT_M_LIST": "upstream"},
    ),
    "plan_format_xml": (["plan", "--format", "xml"], "argument --format: invalid choice", {}),
    "plan_unknown_flag": (["plan", "--frobnicate"], "unrecognized arguments: --frobnicate", {}),
    # doctor
    "doctor_format_xml": (["doctor", "--format", "xml"], "argument --format: invalid choice", {}),
    "doctor_unknown_flag": (["doctor", "--cp", "8"], "unrecognized arguments: --cp 8", {}),
    "doctor_min_kernel_not_a_version": (
        ["doctor", "--no-import"],
        "DEEPGEMM_COMPAT_MIN_SGL_KERNEL='newest': expected a version (e.g. 0.4.9); or unset it "
        "(0.4.9)",
        {"DEEPGEMM_COMPAT_MIN_SGL_KERNEL": "newest"},
    ),
    # the command itself
    "no_command": ([], "the following arguments are required: command", {}),
    "unknown_command": (["frobnicate"], "argument command: invalid choice: 'frobnicate'", {}),
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, to prove nothing is written there."""
    (tmp_path / "keep.txt").write_text("unchanged\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_input(workdir, monkeypatch, case):
    argv, message, env = CASES[case]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = tree(workdir)
    run = run_in_process(main, argv)
    assert run.code == 2 and run.out == ""
    assert run.err.count("\n") == 1 and run.err.endswith("\n"), "one line"
    assert run.err.startswith("deepgemm-compat") and "error: " in run.err
    assert message in run.err
    assert "Traceback" not in run.err
    assert run.spawns == [] and run.children_after == 0
    assert tree(workdir) == before


def test_sglang_list_where_sglang_does_not_import(workdir, monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)  # makes `import sglang...` fail
    run = run_in_process(main, ["plan", "--m-list", "sglang"])
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert "sglang does not import here" in run.err and "fix: install sglang, or pass" in run.err


def test_doctor_names_a_pdl_value_apply_pdl_would_refuse(workdir, monkeypatch):
    """One problem, one diagnostic: a warning (not blocking: SGLang reads the variable itself)."""
    monkeypatch.setenv("SGLANG_DEEPGEMM_PDL", "maybe")
    run = run_in_process(main, ["doctor", "--no-import"])
    warnings = [line for line in run.out.splitlines() if line.startswith("warning[pdl-env]")]
    assert run.code == 0 and len(warnings) == 1
    assert "SGLANG_DEEPGEMM_PDL='maybe' is not a boolean" in warnings[0]


def test_a_bad_variable_does_not_break_the_import():
    """``_load`` reads the pairing at import time: a bad ``DEEPGEMM_COMPAT_ALLOW_UNTESTED`` makes
    the facade unavailable, naming it, instead of an import-time traceback."""
    code = "import deepgemm_compat._load as m; print(m.AVAILABLE, m.MISSING_MESSAGE)"
    env = {**os.environ, "DEEPGEMM_COMPAT_ALLOW_UNTESTED": "2"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("False DEEPGEMM_COMPAT_ALLOW_UNTESTED='2': expected 1 or 0")


def test_kernel_minimum_argument_not_a_version():
    from deepgemm_compat import find_kernel_package

    with pytest.raises(InputError, match=r"minimum='newest' is not a version; fix: set it"):
        find_kernel_package("newest")


# The library ---------------------------------------------------------------------------------
def _distinct(n: int) -> list[GemmShape]:
    return [GemmShape(DENSE, 128 * (i + 1), 128, name=f"g{i}") for i in range(n)]


LIBRARY: dict[str, tuple[tuple, dict, str]] = {
    # name: (args, kwargs, message)
    "chunked_trillion": ((glm51_shapes(), 10**12), {}, "chunked_prefill_size must be <= 2,147"),
    "chunked_zero": ((glm51_shapes(), 0), {}, f"chunked_prefill_size=0: {OFF_RULE}"),
    "chunked_minus_5": ((glm51_shapes(), -5), {}, f"chunked_prefill_size=-5: {OFF_RULE}"),
    "chunked_bool": ((glm51_shapes(), True), {}, "chunked_prefill_size must be an int, got True"),
    "cp_billion_zigzag": (
        (glm51_shapes(), 65536, CPSetup(10**9, "zigzag")),
        {},
        "cp.size must be <= 72 (a CP group stays in one NVLink domain",
    ),
    "cp_not_a_setup": ((glm51_shapes(), 8192, 8), {}, "cp must be a CPSetup or None, got int"),
    "five_thousand_shapes": (
        (glm51_shapes()[:1] * 5000, 8192),
        {},
        "plan_warmup takes at most 4,096 shapes",
    ),
    "too_many_kernels": (
        (_distinct(MAX_KERNELS + 1), 8192),
        {},
        f"plan_warmup plans at most {MAX_KERNELS} distinct (kernel, N, K, groups)",
    ),
    "a_generator": ((iter(glm51_shapes()), 8192), {}, "shapes must be a list or tuple"),
    "not_a_shape": (([(DENSE, 128, 128)], 8192), {}, "shapes[0] must be a GemmShape, got tuple"),
    "n_over_int32": (([GemmShape(DENSE, 2**40, 128)], 8192), {}, "shapes[0].n must be <= 2,147"),
    "floor_huge": ((glm51_shapes(), 8192), {"floor": 10**40}, "floor must be <= 2,147,483,647"),
    "floor_text": ((glm51_shapes(), 8192), {"floor": "2048"}, "floor must be an int, got '2048'"),
    "alignment_huge": ((glm51_shapes(), 8192), {"mk_alignment": 4096}, "must be <= 1,024"),
}


@pytest.mark.parametrize("case", sorted(LIBRARY))
def test_library_bounds_come_before_allocation(case):
    """plan_warmup refuses each with an InputError (a ValueError) and almost nothing allocated:
    without the bounds these build GB of M lists or loop over 10**9 ranks."""
    args, kwargs, message = LIBRARY[case]
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=re.escape(message)):
            plan_warmup(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes traced before the refusal"


def test_minus_one_is_chunking_off():
    plan = plan_warmup(glm51_shapes(), -1, CPSetup(8, "interleave"))
    assert plan.chunked_prefill_size == -1 and plan.m_max == 65536  # SGLang's list, chunking off


_LARGEST = """
import sys
from deepgemm_compat._bounds import MAX_KERNELS
from deepgemm_compat.warmup import GemmShape, KernelType, plan_warmup
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
dense = KernelType.GEMM_NT_F8F8BF16
shapes = [GemmShape(dense, 128 * (i + 1), 128) for i in range(MAX_KERNELS)]
plan_warmup(shapes[:1], 8192, source="copy")  # warm up the code paths
before = hwm()
plan = plan_warmup(shapes, 65536, source="copy")  # no CP: 131,072 Ms before and after, each
print(hwm() - before, plan.before_total)
"""


def test_the_largest_plan_stays_within_plan_bytes():
    proc = subprocess.run(
        [sys.executable, "-c", _LARGEST], capture_output=True, text=True, check=True, timeout=600
    )
    measured, total = map(int, proc.stdout.split())
    print(f"measured {measured / 2**20:.1f} MiB, bound {PLAN_BYTES / 2**20:.0f} MiB")
    assert total == MAX_KERNELS * 131072 and 0 < measured <= PLAN_BYTES


RESOURCE_CASES = ["chunked_trillion", "cp_billion_zigzag"]


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS (KiB) of an ordinary run: a fresh interpreter printing the default plan."""
    tmp = tmp_path_factory.mktemp("baseline")
    run = run_measured("deepgemm_compat.cli", ["plan", "--m-list", "copy"], tmp)
    assert run.code == 0 and "fewer warmup calls" in run.out
    return run.maxrss_kib


@pytest.mark.parametrize("case", RESOURCE_CASES)
def test_hostile_sizes_stay_small(workdir, tmp_path_factory, baseline_rss, case):
    argv, message, _ = CASES[case]
    before = tree(workdir)
    tmp = tmp_path_factory.mktemp("measured")
    run = run_measured("deepgemm_compat.cli", argv, tmp, cwd=workdir)
    assert run.code == 2 and message in run.err and run.err.count("\n") == 1
    assert run.spawns == [] and tree(workdir) == before
    assert run.maxrss_kib <= baseline_rss + 8 * 1024  # a refused run is an ordinary one


def test_the_largest_allowed_plan_runs(workdir):
    argv = ["plan", "--chunked", "2147483584", "--cp", "8", "--fast", "--fast-to-chunk"]
    run = run_in_process(main, [*argv, "--format", "json"])
    assert run.code == 0 and '"chunked_prefill_size": 2147483584' in run.out


# Counts and plurals ----------------------------------------------------------------------------
def test_counts_read_right(workdir):
    run = run_in_process(main, ["plan", "--chunked", "65536", "--cp", "8", "--fast"])
    assert "forwards up to 131072 tokens; a rank runs at most 16384 rows)" in run.out
    run = run_in_process(main, ["plan", "--cp", "1"])
    assert run.out.splitlines()[-1].endswith("0 fewer warmup calls (0%)")


# Pipes -----------------------------------------------------------------------------------------
def _closed_stdout_run(*argv: str) -> subprocess.CompletedProcess:
    return run_into_closed_pipe("deepgemm_compat", *argv, timeout=600)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--chunked", "65536", "--cp", "8"],
        ["plan", "--chunked", "65536", "--format", "json"],
        ["doctor", "--no-import"],
        ["doctor", "--no-import", "--format", "json"],
        ["--help"],
        ["plan", "--help"],
    ],
)
def test_closed_stdout_is_quiet(argv):
    proc = _closed_stdout_run(*argv)
    assert proc.stderr == "" and proc.returncode == 0


def test_doctor_keeps_its_exit_code_on_a_closed_stdout():
    """Without a GPU the full doctor finds a blocking problem (exit 1) whether or not anyone
    reads its report; with one, both exit 0."""
    normal = subprocess.run(
        [sys.executable, "-m", "deepgemm_compat", "doctor"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    closed = _closed_stdout_run("doctor")
    assert closed.stderr == "" and closed.returncode == normal.returncode


def test_head_dash_3_is_quiet():
    """``deepgemm-compat plan ... | head -3`` prints three lines and no BrokenPipeError (whether
    head exits before the write or after it; the closed-stdout runs above make it fail surely)."""
    cmd = f"{sys.executable} -m deepgemm_compat plan --chunked 65536 --format json"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{cmd} | head -3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.stdout.count("\n") == 3 and proc.stderr == "" and proc.returncode == 0


def test_closed_stdout_keeps_the_exit_code_of_an_error():
    proc = _closed_stdout_run("plan", "--chunked", "-5")
    assert proc.returncode == 2 and proc.stderr.startswith("deepgemm-compat plan: error: --chunk")


# Output that cannot be written -----------------------------------------------------------------
WRITE_ERROR = "error: cannot write the output to stdout (No space left on device), so it is "


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--chunked", "65536", "--cp", "8"],
        ["plan", "--format", "json"],
        ["doctor", "--no-import"],
        ["--help"],
        ["plan", "--help"],
    ],
)
def test_a_full_disk_is_one_line(argv):
    """``> /dev/full``: every write fails with ENOSPC, as on a full disk. argparse alone would drop
    the --help text silently and exit 0; a plan would end in a traceback."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "deepgemm_compat", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=600,
        )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert WRITE_ERROR in proc.stderr and "fix: send it to a file" in proc.stderr


def _limit_file_size() -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))


def test_a_file_over_its_size_limit_is_one_line(tmp_path):
    """A real failing write part-way: the kernel refuses the file past 1000 bytes (EFBIG)."""
    out = tmp_path / "plan.json"
    with out.open("w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "deepgemm_compat", "plan", "--format", "json"],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=600,
            preexec_fn=_limit_file_size,
        )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot write the output to stdout (File too large), so it is incomplete" in proc.stderr
    assert out.stat().st_size <= 1000


def test_a_closed_stdout_descriptor_is_one_line():
    """Started with fd 1 closed (``>&-``): Python sets sys.stdout to None and print drops text."""
    proc = subprocess.run(
        [sys.executable, "-m", "deepgemm_compat", "plan"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=600,
        preexec_fn=lambda: os.close(1),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "error: stdout is closed, so there is nowhere to write the output" in proc.stderr
