"""Backend factories loaded through real ``importlib.metadata.EntryPoint`` objects in the tests.

``counting(name)`` backends run the torch definitions on CPU and count calls per op.
"""

from __future__ import annotations

from collections import Counter

import cpkv_runtime as cr

CALLS: Counter[tuple[str, str]] = Counter()
LOADS: Counter[str] = Counter()


def counting(name: str, ops=cr.OP_NAMES, devices=("cpu",), available=True, reason="") -> cr.Backend:
    torch_ops = cr.available_backends()["torch"].ops

    def wrap(op):
        def call(*args, **kwargs):
            CALLS[(name, op)] += 1
            return torch_ops[op](*args, **kwargs)

        return call

    return cr.Backend(
        name=name,
        ops={op: wrap(op) for op in ops},
        available=available,
        reason=reason,
        devices=frozenset(devices),
    )


def cuda_on_cpu() -> cr.Backend:
    LOADS["cuda_on_cpu"] += 1
    return counting("cuda")


def triton_on_cpu() -> cr.Backend:
    LOADS["triton_on_cpu"] += 1
    return counting("triton")


def cuda_without_remap() -> cr.Backend:
    return counting("cuda", ops=[op for op in cr.OP_NAMES if op != "remap_locs"])


def cuda_unavailable() -> cr.Backend:
    return counting("cuda", available=False, reason="no CUDA device is visible")


def triton_gpu_only() -> cr.Backend:
    return counting("triton", devices=("cuda",))


def broken() -> cr.Backend:
    raise RuntimeError("libcuda.so.1: cannot open shared object file")


def not_a_backend() -> int:
    return 42
