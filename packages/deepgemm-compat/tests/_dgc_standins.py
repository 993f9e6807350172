"""Stand-in ``deep_gemm`` modules built from tests/fixtures/surfaces.json.

These are test doubles: the real wheels need CUDA (a GPU and the CUDA runtime) to run
kernels, which the CPU test machines lack. Everything about their surface comes from the
fixture, which scripts/gen_surfaces.py extracted from the published wheels:

* each top-level wrapper has the wheel's exact signature (names, kinds, defaults) and
  records its calls; aliases (``fp8_gemm_nt = fp8_fp4_gemm_nt``, ``set_pdl = _C.set_pdl``)
  point where the wheel's do;
* ``_C`` has exactly the entry points the wheel's ``_C.so`` exports;
* wrappers that route an operand through ``_parse_tensor_or_tuple`` build the unit scale
  for a bare tensor with the wheel's own constructor call (``torch.Tensor(..., dtype=)``
  up to 0.1.7, which raises the genuine TypeError);
* return values follow the TORCH_LIBRARY schemas the fixture holds for 0.2.3+: GEMMs
  return ``()`` (None), logits ops a float32 tensor, the metadata op an int32
  ``(num_sms + 1, 2)`` tensor. The GPU tests check the same on the real 0.1.4.post1.
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass, field
from typing import Any

import torch

DEFAULT_NUM_SMS = 132  # an H200


@dataclass
class Call:
    name: str
    args: dict[str, Any]


@dataclass
class State:
    calls: list[Call] = field(default_factory=list)
    num_sms: int = DEFAULT_NUM_SMS
    pdl: bool = False

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


class _Expr:
    """A default value that is an expression (``torch.float``), kept as its source."""

    def __init__(self, src: str) -> None:
        self.src = src

    def __repr__(self) -> str:
        return self.src


_KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "var_positional": inspect.Parameter.VAR_POSITIONAL,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    "var_keyword": inspect.Parameter.VAR_KEYWORD,
}


def _default(src: str) -> Any:
    try:
        return ast.literal_eval(src)
    except (ValueError, SyntaxError):
        return _Expr(src)


def signature_of(params: list[dict]) -> inspect.Signature:
    return inspect.Signature(
        [
            inspect.Parameter(
                p["name"],
                _KINDS[p["kind"]],
                default=_default(p["default"]) if "default" in p else inspect.Parameter.empty,
            )
            for p in params
        ]
    )


def _result(name: str, bound: dict[str, Any], state: State) -> Any:
    """What the wheel's C side hands back (see module docstring)."""
    if name.endswith("paged_mqa_logits") and "sparse" not in name:
        q = bound["q"][0] if isinstance(bound["q"], tuple | list) else bound["q"]
        return torch.ones((q.shape[0] * q.shape[1], bound["max_context_len"]), dtype=torch.float32)
    if name.endswith("mqa_logits") and "sparse" not in name:
        q = bound["q"][0] if isinstance(bound["q"], tuple | list) else bound["q"]
        kv = bound["kv"][0] if isinstance(bound["kv"], tuple | list) else bound["kv"]
        width = bound.get("max_seqlen_k") or kv.shape[0]
        return torch.ones((q.shape[0], width), dtype=torch.float32)
    if name == "get_paged_mqa_logits_metadata":
        return torch.zeros((bound["num_sms"] + 1, 2), dtype=torch.int32)
    if name == "get_mn_major_tma_aligned_tensor":
        return bound["sf"]  # the fast path: an alias of its input
    return None


def _wrapper(name: str, spec: dict, state: State, scale_ctor: str) -> types.FunctionType:
    sig = signature_of(spec["params"])
    parsed = set(spec["parses_tensor_or_tuple"])

    def fn(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)  # TypeError exactly where the wheel raises one
        bound.apply_defaults()
        values = dict(bound.arguments)
        for p in parsed:
            v = values.get(p)
            if isinstance(v, torch.Tensor):  # the wheel's _parse_tensor_or_tuple on a bare tensor
                ctor = torch.Tensor if scale_ctor == "torch.Tensor" else torch.tensor
                ctor([1.0], dtype=torch.float32, device=v.device)
        state.calls.append(Call(name, values))
        return _result(name, values, state)

    fn.__name__ = name
    fn.__signature__ = sig
    return fn


def _c_entry(name: str, state: State) -> Any:
    def fn(*args: Any) -> Any:
        state.calls.append(Call(f"_C.{name}", {"args": args}))
        if name == "set_pdl":
            state.pdl = bool(args[0])
        elif name == "get_pdl":
            return state.pdl
        elif name == "set_num_sms":
            state.num_sms = int(args[0])
        elif name == "get_num_sms":
            return state.num_sms
        elif name == "get_mk_alignment_for_contiguous_layout":
            return 128
        return None

    fn.__name__ = name
    return fn


def build(version: str, data: dict) -> tuple[types.ModuleType, State]:
    """A ``deep_gemm`` stand-in for one release, and the state that records its calls."""
    state = State()
    mod = types.ModuleType("deep_gemm")
    mod.__version__ = version
    mod._C = types.SimpleNamespace(**{n: _c_entry(n, state) for n in data["c_symbols"]})
    for name, spec in data["functions"].items():
        if not name.startswith("_"):
            setattr(mod, name, _wrapper(name, spec, state, data["scale_ctor"]))
    for name, spec in data["utils_layout_functions"].items():  # `from .utils import *`
        if not name.startswith("_") and not hasattr(mod, name):
            setattr(mod, name, _wrapper(name, spec, state, data["scale_ctor"]))
    for name, target in data["aliases"].items():
        if name.startswith("_"):
            continue
        if target.startswith("_C."):
            value = getattr(mod._C, target[3:], None)
        else:
            value = getattr(mod, target, None)
        if callable(value):
            setattr(mod, name, value)
    return mod, state
