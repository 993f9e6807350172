"""Programmatic dependent launch (PDL) and the compile-mode switch, across releases.

* ``SGLANG_DEEPGEMM_PDL``: bool, whether DeepGEMM kernels use PDL, ``1`` (on) by default
  as in SGLang; DeepGEMM's own default is off.
* ``set_pdl`` is top-level from 0.1.4, only ``deep_gemm._C.set_pdl`` in 0.1.1-0.1.3, absent
  before. It may create CUDA state on the current device, so it runs after the device is
  chosen (``apply_pdl(device)`` sets the device first).
* ``get/set_compile_mode`` exist in no published wheel; ``compile_mode()`` is then a no-op.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepgemm_compat._surface import Surface, surface

if TYPE_CHECKING:
    import torch

PDL_ENV = "SGLANG_DEEPGEMM_PDL"
_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def pdl_from_env(environ: dict[str, str] | None = None) -> bool:
    """``SGLANG_DEEPGEMM_PDL`` as a bool; unset or empty means on.

    Raises:
        ValueError: the variable holds something other than a boolean word.
    """
    raw = (os.environ if environ is None else environ).get(PDL_ENV, "").strip().lower()
    if raw == "" or raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{PDL_ENV}={raw!r} is not a boolean; use 1/0, true/false, on/off")


@dataclass(frozen=True)
class PdlResult:
    """What ``apply_pdl`` did. ``via`` is the symbol used (``"set_pdl"``/``"_C.set_pdl"``)."""

    requested: bool
    applied: bool
    via: str | None
    device: int | None
    note: str = ""


def set_pdl_switch(s: Surface, enabled: bool) -> PdlResult:
    """Flip the wheel's PDL switch without touching the device (see ``apply_pdl``)."""
    fn = s.fn("set_pdl")
    if fn is None:
        note = (
            f"sgl-deep-gemm {s.version} has no PDL switch (deep_gemm._C.set_pdl arrived in 0.1.1)"
        )
        return PdlResult(enabled, False, None, None, note)
    fn(bool(enabled))
    return PdlResult(enabled, True, s.which("set_pdl"), None)


def apply_pdl(device: int | str | torch.device, enabled: bool | None = None) -> PdlResult:
    """Choose the GPU, then set DeepGEMM's PDL switch.

    Args:
        device: the CUDA device this process uses (index, ``"cuda:1"`` or ``torch.device``).
        enabled: force on/off; ``None`` reads ``SGLANG_DEEPGEMM_PDL`` (default on).
    """
    import torch

    from deepgemm_compat._load import require_cuda

    require_cuda()
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"apply_pdl: device must be a CUDA device, got {dev}")
    torch.cuda.set_device(dev)
    result = set_pdl_switch(surface(), pdl_from_env() if enabled is None else enabled)
    index = torch.cuda.current_device()
    return PdlResult(result.requested, result.applied, result.via, index, result.note)


def get_pdl() -> bool | None:
    """The wheel's current PDL setting; ``None`` where the release has no switch."""
    fn = surface().fn("get_pdl")
    return None if fn is None else bool(fn())


@contextlib.contextmanager
def compile_mode(mode: int = 1) -> Iterator[bool]:
    """Run the block with DeepGEMM's compile mode set to ``mode``, restoring it after.

    Yields:
        True when the wheel has the switch, False when the context is a no-op (every
        published wheel so far).
    """
    s = surface()
    get, set_ = s.fn("get_compile_mode"), s.fn("set_compile_mode")
    if get is None or set_ is None:
        yield False
        return
    old = get()
    set_(mode)
    try:
        yield True
    finally:
        set_(old)
