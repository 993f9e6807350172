"""What the machine can host, checked against the parallel sizes before SGLang is imported.

A node runs ``ceil(tp * pp / nnodes)`` ranks, on GPUs ``base_gpu_id + i * gpu_id_step``, and
``dp`` replicas or attention-DP groups need a GPU each at least. The bound is the machine that will
run them:

- serving, and a dry run resolved for this machine: what SGLang will use, the visible CUDA devices
  (``--device cuda``, or unset) or the CPU cores this process may run on (``--device cpu``). A
  machine without a visible CUDA device is refused unless ``--device`` names another device:
  SGLang would fall back to the CPU unasked and fail in a traceback (or serve a DSA model on no
  kernel of its backends). Other devices are not counted;
- a dry run for ``--gpu sm90|sm100`` describes another machine, not this one: a node of at most
  ``DRY_RUN_GPUS_PER_NODE`` GPUs, one HGX/DGX board of either kind.

CUDA devices are counted with the driver API (``cuInit``, ``cuDeviceGetCount`` from
``libcuda.so.1``, which honours ``CUDA_VISIBLE_DEVICES``), not with torch: importing torch starts a
process (``ldconfig -p``) and takes half a gigabyte, and a refusal must come before both. The
launcher initialises CUDA anyway when SGLang asks the device capability, and SGLang starts its
workers with ``spawn``, so nothing inherits this.
"""

from __future__ import annotations

import ctypes
import os

from cpkv_cli import InputError

from sglang_cpkv.serve._sglang_argv import SGLangArgs

DRY_RUN_GPUS_PER_NODE = 8
_CUDA_SUCCESS = 0


def cuda_device_count() -> int:
    """CUDA devices this process sees (0 without a driver or a device)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != _CUDA_SUCCESS or cuda.cuDeviceGetCount(ctypes.byref(count)):
        return 0
    return count.value


def check_machine(args: SGLangArgs, dry_run: bool, gpu: str | None) -> None:
    """The node's ranks against what the machine (or the dry run's machine) holds.

    Raises:
        InputError: more ranks, replicas or GPU ids than it holds, or CUDA asked of a machine
            without it.
    """
    if dry_run and gpu:
        capacity = DRY_RUN_GPUS_PER_NODE
        holds = f"a dry run for --gpu {gpu} resolves one node of at most {capacity} GPUs"
    else:
        counted = machine_capacity(args.device, dry_run)
        if counted is None:
            return
        capacity, holds = counted
    ranks = -(-args.tp_size * args.pp_size // args.nnodes)  # ceil, exact for any int
    sizes = f"{args.name('tp_size')} {args.tp_size}"
    if args.pp_size > 1:
        sizes += f" x {args.name('pp_size')} {args.pp_size}"
    if args.nnodes > 1:
        sizes += f" / {args.name('nnodes')} {args.nnodes}"
    if ranks > capacity:
        raise InputError(
            f"{sizes} puts {ranks} ranks on this node, but {holds}; give at most {capacity} "
            f"per node (more --nnodes for more)"
        )
    if args.dp_size > capacity * args.nnodes:
        raise InputError(
            f"{args.name('dp_size')} {args.dp_size} needs a GPU per replica at least, but {holds}"
        )
    last = args.base_gpu_id + (ranks - 1) * args.gpu_id_step
    if last >= capacity:
        raise InputError(
            f"{args.name('base_gpu_id')} {args.base_gpu_id} with {args.name('gpu_id_step')} "
            f"{args.gpu_id_step} puts rank {ranks - 1} on GPU {last}, but {holds}"
        )


def machine_capacity(device: str | None, dry_run: bool) -> tuple[int, str] | None:
    """``(ranks this machine can hold, what it holds in words)``; None when not counted.

    Raises:
        InputError: CUDA is asked for (``--device cuda`` or unset, or a dry run of this machine)
            and there is none.
    """
    if device not in (None, "cuda", "cpu"):
        return None
    cuda = 0 if device == "cpu" else cuda_device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    if cuda:
        verb = "is" if cuda == 1 else "are"
        return cuda, f"{_count(cuda, 'CUDA device')} {verb} visible{shown}"
    if dry_run:
        raise InputError(
            "--dry-run: no CUDA GPU on this machine; pass --gpu sm90 or --gpu sm100 to resolve "
            "for one"
        )
    if device != "cpu":
        lead = (
            f"--device cuda, but no CUDA device is visible{shown}"
            if device == "cuda"
            else f"no CUDA GPU is visible on this machine{shown}, and cpkv-serve serves on CUDA "
            f"GPUs (SGLang would fall back to the CPU)"
        )
        raise InputError(f"{lead}; run on a GPU host, or add --dry-run --gpu sm90|sm100 to see "
                         f"what it would run")  # fmt: skip
    cores = len(os.sched_getaffinity(0))
    return cores, f"this process may run on {_count(cores, 'CPU core')}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
