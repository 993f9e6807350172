"""Memory budgets: where an op's byte limit comes from, and how sizes read in its error.

Every op that can be asked for an absurd size (``cp_split`` with ``cp_size=10**6``,
``plan_layout`` over a pool of ``10**10`` pages) works its bytes out from shapes and lengths
first and holds them to a budget, so a refusal comes before anything of that size exists.
The budget, first set wins:

1. the op's ``max_bytes=`` argument (an int >= 0);
2. the op's environment variable (a byte count, parsed by its ``cpkv_cli.environment``
   declaration), e.g. ``CPKV_CP_SPLIT_MAX_BYTES``;
3. what the device can host now: on CUDA the free memory plus what PyTorch's caching allocator
   holds unused; on CPU ``MemAvailable`` from /proc/meminfo. On another device, or where that
   cannot be read, there is no default budget.

The source is named in every refusal, so a user sees which of the three to change.
"""

from __future__ import annotations

import os

import torch
from cpkv_cli.environment import VARIABLES

from .errors import LayoutError

__all__ = ["count", "device_budget", "explicit_budget", "gib", "resolve_budget"]


def resolve_budget(device: torch.device, max_bytes: int | None, env: str) -> tuple[int | None, str]:
    """``(budget in bytes, where it came from)``; ``(None, "")`` when there is none.

    Raises:
        LayoutError: ``max_bytes`` is not an int >= 0, or ``env`` is set to a non-count.
    """
    explicit = explicit_budget(max_bytes, env)
    return explicit if explicit[0] is not None else device_budget(device)


def explicit_budget(max_bytes: int | None, env: str) -> tuple[int | None, str]:
    """The budget the caller set (argument, then ``env``), without asking any device."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise LayoutError(f"max_bytes must be an int >= 0 or None, got {max_bytes!r}")
        return max_bytes, "max_bytes="
    if (value := VARIABLES[env].read(error=LayoutError)) is not None:
        return value, f"{env}={value}"
    return None, ""


def device_budget(device: torch.device) -> tuple[int | None, str]:
    """What ``device`` can host now (see the module docstring); ``(None, "")`` if unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached, f"free memory of {device}"
    if device.type == "cpu":
        return _mem_available(), "MemAvailable of this host"
    return None, ""


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def count(n: int, noun: str) -> str:
    """``1 request``, ``2 requests``, ``1,000,000 pages``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def gib(n: int) -> str:
    """A byte count the way a person reads it: GiB, MiB, or bytes."""
    if n >= 2**30:
        return f"{n / 2**30:,.2f} GiB"
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,} bytes"
