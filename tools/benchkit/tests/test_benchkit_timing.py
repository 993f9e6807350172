"""Timers on real callables and real child processes (no fake clocks); CUDA ones on a GPU."""

from __future__ import annotations

import sys
import time

import pytest
import torch
from benchkit import cuda_event_times, cuda_graph_times, process_times, timed, wall_times

SLEEP_S = 0.002


class Counter:
    """A callable that counts its calls (and optionally sleeps)."""

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.calls, self.sleep_s = 0, sleep_s

    def __call__(self) -> None:
        self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)


@pytest.mark.parametrize(("reps", "warmup", "calls"), [(1, 0, 1), (3, 2, 1), (4, 1, 5)])
def test_wall_times_calls_and_syncs_as_asked(reps, warmup, calls):
    fn, syncs = Counter(), Counter()
    samples = wall_times(fn, reps=reps, warmup=warmup, calls=calls, sync=syncs)
    assert len(samples) == reps
    assert fn.calls == warmup + reps * calls
    assert syncs.calls == reps + 1  # after the warm-up, and before each clock stop
    assert all(s >= 0 for s in samples)


def test_wall_times_cover_the_work_timed():
    samples = wall_times(Counter(SLEEP_S), reps=3, warmup=0, calls=2)
    assert all(s >= SLEEP_S for s in samples)  # per call: each call sleeps SLEEP_S


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"reps": 0}, "reps=0"), ({"reps": 1, "calls": 0}, "calls=0"),
    ({"reps": 1, "warmup": -1}, "warmup=-1"),
])  # fmt: skip
def test_wall_times_rejects_bad_counts(kwargs, match):
    with pytest.raises(ValueError, match=match):
        wall_times(Counter(), **kwargs)


def test_timed_returns_result_and_duration():
    result, seconds = timed(lambda: time.sleep(SLEEP_S) or 42)
    assert result == 42 and seconds >= SLEEP_S


def test_process_times_measure_the_child():
    wall, cpu = process_times([sys.executable, "-c", f"import time; time.sleep({SLEEP_S * 10})"])
    assert wall >= SLEEP_S * 10 and cpu >= 0
    busy = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.05: pass"
    _, cpu = process_times([sys.executable, "-c", busy])
    assert cpu >= 0.05  # the child spun on its own CPU clock for 50 ms


def test_process_times_name_a_failing_command(tmp_path):
    code = "import sys; print('bad input'); sys.exit(3)"
    with pytest.raises(RuntimeError, match=r"exited 3:\nbad input"):
        process_times([sys.executable, "-c", code], cwd=tmp_path)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("flush_l2", [False, True])
@pytest.mark.parametrize("mode", ["reps", "budget"])
def test_cuda_event_times(mode, flush_l2):
    a = torch.randn(1024, 1024, device="cuda")
    kwargs = {"reps": 7} if mode == "reps" else {"budget_s": 0.01, "warmup_s": 0.002}
    fn = Counter()

    def work():
        fn()
        return a @ a

    samples = cuda_event_times(work, flush_l2=flush_l2, warmup=0, **kwargs)
    assert all(s > 0 for s in samples)
    if mode == "reps":  # warmup=0: exactly the timed calls, nothing untimed
        assert len(samples) == 7 and fn.calls == 7


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"reps": 3, "budget_s": 1.0}, "exactly one of reps= and budget_s="),
    ({}, "exactly one of reps= and budget_s="),
    ({"reps": 0}, "reps=0"), ({"reps": 2, "warmup": -1}, "warmup=-1"),
])  # fmt: skip
def test_cuda_event_times_checks_its_counts_before_any_call(kwargs, match):
    fn = Counter()
    with pytest.raises(ValueError, match=match):
        cuda_event_times(fn, **kwargs)
    assert fn.calls == 0


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_times_replays_the_captured_calls():
    a = torch.randn(512, 512, device="cuda")
    out = torch.empty_like(a)
    samples = cuda_graph_times(lambda: torch.matmul(a, a, out=out), replays=5)
    assert len(samples) == 5 and all(s > 0 for s in samples)


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_times_refuses_a_host_sync():
    a = torch.randn(64, device="cuda")
    with pytest.raises(RuntimeError):
        cuda_graph_times(lambda: a.nonzero(), replays=2)  # nonzero syncs: not capturable
