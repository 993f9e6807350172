"""Resolve SGLang's server arguments without a GPU or weights.

SGLang's resolution reads the model's ``config.json`` (nothing else from the checkpoint) and asks
the GPU two things: ``torch.cuda.get_device_capability()`` and the platform facts of
``sglang.srt.runtime_context.get_platform()`` (``is_sm100``, ``device_sm``...). To resolve for
another GPU both are replaced, the second through SGLang's own ``override_platform``; nothing
else is stubbed, so the result is what SGLang 0.5.23 decides with the plugin's hooks applied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


def platform_facts(capability: tuple[int, int]) -> dict[str, Any]:
    """The CUDA platform facts SGLang derives from a compute capability."""
    major, minor = capability
    return {
        "is_cuda": True,
        "is_hip": False,
        "is_npu": False,
        "is_xpu": False,
        "is_musa": False,
        "is_mps": False,
        "is_sm90": major == 9,
        "is_hopper_with_cuda_12_3": major == 9,
        "is_sm100": major == 10,
        "is_sm100_or_sm110": major in (10, 11),
        "is_sm110": major == 11,
        "is_sm120": major == 12,
        "is_blackwell": major in (10, 11, 12),
        "device_sm": major * 10 + minor,
        "device_capability": capability,
    }


@contextlib.contextmanager
def emulated_gpu(capability: tuple[int, int]) -> Iterator[None]:
    """Make SGLang (and this plugin) see a CUDA GPU of ``capability`` inside the block.

    Replaces only the capability query and SGLang's platform facts; restores both on exit.
    """
    import sglang.srt.runtime_context as rc
    import torch

    # Only the facts this SGLang knows: 0.5.20 and 0.5.21 have no is_mps / is_sm110 and refuse
    # an unknown fact (their resolution never reads one). The names are SGLang's own table.
    known = {*getattr(rc, "_PLATFORM_PROBES", {}), *getattr(rc, "_PLATFORM_VALUES", {})}
    facts = {k: v for k, v in platform_facts(capability).items() if not known or k in known}
    saved = torch.cuda.get_device_capability

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return capability

    torch.cuda.get_device_capability = get_device_capability
    try:
        with rc.override_platform(**facts):
            yield
    finally:
        torch.cuda.get_device_capability = saved


def local_capability() -> tuple[int, int] | None:
    """This machine's GPU capability, or None without a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]


def with_device(argv: Sequence[str]) -> list[str]:
    """Add ``--device cuda`` unless given (SGLang probes for an accelerator otherwise)."""
    argv = list(argv)
    if not any(a == "--device" or a.startswith("--device=") for a in argv):
        argv += ["--device", "cuda"]
    return argv


def resolve(argv: Sequence[str], capability: tuple[int, int] | None) -> Any:
    """Parse and resolve ``argv`` the way ``sglang serve`` does, with the plugin active.

    Args:
        argv: SGLang server arguments (cpkv flags already translated).
        capability: GPU to emulate; None resolves on the local GPU.

    Returns:
        The resolved ``ServerArgs`` record.
    """
    from sglang_cpkv.plugin import _decisions
    from sglang_cpkv.plugin.entry import activate

    activate()  # before SGLang's logging is set up: a refusal is one line (cli.serve)
    from sglang.srt.server_args import prepare_server_args

    _decisions.clear()
    if capability is None:
        server_args = prepare_server_args(list(argv))
        server_args.resolve_once()
        return server_args
    with emulated_gpu(capability):
        server_args = prepare_server_args(with_device(argv))
        server_args.resolve_once()
    return server_args
