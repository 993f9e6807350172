"""Each Triton launcher registered as the custom op ``cpkv::<op>_triton``, from the contract.

The op's schema, and so the arguments it writes, come from ``cpkv_runtime._contract.OP_SPECS``
(sizes ``SymInt``); its fake kernel is the contract's shapes rule (None for the ops that write
into their arguments). A launcher takes the schema's arguments, by the same names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from cpkv_runtime._contract import OP_SPECS

__all__ = ["triton_op"]


def triton_op(
    name: str, launcher: Callable[..., Any], *, schema: str | None = None
) -> torch.library.CustomOpDef:
    """Register ``launcher`` as ``cpkv::<name>_triton`` with the contract's schema of ``name``
    (or ``schema``, for a Triton form of its own) and fake kernel."""
    spec = OP_SPECS[name]
    schema = schema or spec.triton_schema()
    writes = tuple(re.findall(r"\(a\d+!\) (\w+)", schema))
    op = torch.library.custom_op(
        f"cpkv::{name}_triton", launcher, mutates_args=writes, schema=schema
    )
    op.register_fake(spec.fake if schema == spec.triton_schema() else lambda *args: None)
    return op
