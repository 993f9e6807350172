"""Input validation shared by the facade: shape, dtype and device, before any launch.

Nothing here reads tensor values (no host sync); every failure is an InputError that
names the tensor, what was expected, what was given, and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepgemm_compat.errors import InputError

if TYPE_CHECKING:
    import torch


def shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def need_dim(name: str, t: torch.Tensor, dims: int, layout: str) -> None:
    if not hasattr(t, "dim"):
        raise InputError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dim() != dims:
        raise InputError(f"{name} must be {dims}-D {layout}, got shape {shape(t)}")


def need_dtype(name: str, t: torch.Tensor, *dtypes: torch.dtype, fix: str = "") -> None:
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        tail = f"; {fix}" if fix else ""
        raise InputError(f"{name} must be {want}, got {t.dtype}{tail}")


def need_size(name: str, t: torch.Tensor, dim: int, expected: int, why: str) -> None:
    if t.shape[dim] != expected:
        raise InputError(
            f"{name}.shape[{dim}] must be {expected} ({why}), got {t.shape[dim]} (shape {shape(t)})"
        )


def need_shape(name: str, t: torch.Tensor, expected: tuple[int, ...], layout: str = "") -> None:
    if shape(t) != expected:
        want = f"{layout} = {expected}" if layout else str(expected)
        raise InputError(f"{name} must have shape {want}, got {shape(t)}")


def same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise InputError(f"all tensors must be on one device, got {listed}")


def fp8_pair(name: str, pair: object, rows_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a ``(data, scale)`` operand; the data's leading dims must match the scale's."""
    import torch

    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise InputError(
            f"{name} must be a (tensor, scale) pair as DeepGEMM takes it, got {type(pair).__name__}"
        )
    data, scale = pair
    need_dtype(f"{name}[0]", data, torch.float8_e4m3fn, fix="quantise with per-token/per-block fp8")
    need_dtype(
        f"{name}[1]", scale, torch.float32, torch.int32, fix="float32 scales (int32 = packed UE8M0)"
    )
    if scale.dim() != data.dim():
        raise InputError(
            f"{name}[1] (scales) must have as many dims as {name}[0] {shape(data)}, "
            f"got {shape(scale)}"
        )
    for d in range(rows_dim):
        if scale.shape[d] != data.shape[d]:
            raise InputError(
                f"{name}[1].shape[{d}] must equal {name}[0].shape[{d}]={data.shape[d]}, "
                f"got {scale.shape[d]}"
            )
    return data, scale


def context_lens_2d(context_lens: torch.Tensor, batch: int, next_n: int) -> None:
    """Context lengths are always ``(batch, next_n)`` int32; 1-D is refused with the fix."""
    import torch

    if not hasattr(context_lens, "dim"):
        raise InputError(f"context_lens must be a torch.Tensor, got {type(context_lens).__name__}")
    if context_lens.dim() == 1:
        raise InputError(
            f"context_lens must be 2-D int32 (batch, next_n), got 1-D shape {shape(context_lens)}; "
            "for one query token per row (SGLang's per-token layout) pass "
            "context_lens.view(-1, 1) with q of shape (N_total, 1, heads, dim)"
        )
    need_dim("context_lens", context_lens, 2, "(batch, next_n) int32")
    need_dtype("context_lens", context_lens, torch.int32, fix="use .to(torch.int32)")
    if shape(context_lens) != (batch, next_n):
        raise InputError(
            f"context_lens must have shape (batch, next_n) = {(batch, next_n)} from q, "
            f"got {shape(context_lens)}"
        )


def int32_layout(name: str, t: torch.Tensor, dims: int) -> None:
    import torch

    need_dim(name, t, dims, "int32")
    need_dtype(name, t, torch.int32, fix="use .to(torch.int32)")
