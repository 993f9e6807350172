"""Test setup: helper modules on sys.path, hypothesis profiles, seeds, quiet backend discovery."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # _oracle, _legacy, _scenarios, _strategies

# "ci" (CI=true): 500 examples per property; "dev" (default locally): 60; override with
# HYPOTHESIS_PROFILE.
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _ci else "dev"))


@pytest.fixture(scope="session", autouse=True)
def _discover_backends():
    """Run entry-point discovery once, outside any test: a broken third-party backend warns
    (BackendWarning) and is skipped; that warning is the plugin's, not a failure of these tests."""
    import cpkv_runtime

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backends = cpkv_runtime.available_backends()
    for w in caught:
        print(f"backend discovery: {w.message}")
    return backends


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    """Fixed seed; one intra-op thread: these tensors are tiny and threads only add wake-up
    latency (20 ms per op on a busy 2-core runner against 50 us single-threaded). Restored after
    each test so other packages' tests in the same session are unaffected."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _no_forced_backend(monkeypatch):
    """Tests choose backends explicitly; an inherited CPKV_BACKEND must not leak in."""
    monkeypatch.delenv("CPKV_BACKEND", raising=False)


@pytest.fixture(scope="session", params=["torch", "triton", "cuda"])
def backend(request) -> str:
    """Each backend that runs on CPU tensors here (triton does under TRITON_INTERPRET=1)."""
    import cpkv_runtime

    found = cpkv_runtime.available_backends().get(request.param)
    if found is None:
        pytest.skip(f"backend {request.param!r} is not registered (cpkv-kernels not installed?)")
    if not found.available:
        pytest.skip(f"backend {request.param!r} is unavailable: {found.reason}")
    if "cpu" not in found.devices:
        pytest.skip(f"backend {request.param!r} does not run on CPU tensors")
    return request.param


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except torch.OutOfMemoryError as exc:
        pytest.skip(f"out of memory: {exc}")
