"""Test setup: Triton interpreted on CPU-only machines, helpers on sys.path, seeds, OOM -> skip.

Without a GPU, ``TRITON_INTERPRET=1`` is set for the test process before anything imports Triton
(Triton reads it when kernels are decorated, its own included), so the Triton kernels run on CPU
tensors. Run this package's tests in their own process (as CI does): under the variable the
runtime's automatic dispatch also sends CPU tensors to the interpreted Triton kernels.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # _cases, _compare

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import cpkv_runtime  # noqa: E402
from cpkv_kernels._api import make_ops  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _discover_backends():
    """Entry-point discovery once, outside any test (its warnings are not these tests')."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        return cpkv_runtime.available_backends()


@pytest.fixture(scope="session")
def device() -> str:
    """Where the Triton kernels run here: cuda, else cpu (interpreted)."""
    return DEVICE


@pytest.fixture(scope="session")
def torch_ops():
    """The oracle: cpkv_runtime's torch backend."""
    return cpkv_runtime.available_backends()["torch"].ops


@pytest.fixture(scope="session")
def triton_ops():
    return make_ops("triton")


@pytest.fixture(scope="session")
def impls(triton_ops) -> dict[str, dict]:
    """The kernel backends that run here: triton always, cuda with a GPU."""
    found = {"triton": triton_ops}
    if torch.cuda.is_available():
        from cpkv_kernels import _cuda_ops

        _cuda_ops.load()
        found["cuda"] = make_ops("cuda")
    return found


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_forced_backend(monkeypatch):
    monkeypatch.delenv("CPKV_BACKEND", raising=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except torch.OutOfMemoryError as exc:
        pytest.skip(f"out of memory: {exc}")
