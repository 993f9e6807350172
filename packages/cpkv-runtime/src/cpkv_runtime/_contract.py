"""The backend contract, one entry per op: its signature, its checks and its output shapes.

Each op is written once here and implemented three times, by computing only: the torch definition
(``_torch_*.py``, the semantics of ``_backend.py``), and the Triton and CUDA kernels of
``cpkv_kernels``. An :class:`OpSpec` holds

- ``schema``: the op's arguments and results as ``torch.library`` writes them, in the form the
  kernels take (every output an argument they write, marked ``(a!)``). The CUDA extension
  declares it in C++ (``csrc/binding*.cpp``, held to this text by a test of ``cpkv_kernels``); the
  Triton custom ops are registered from it (:meth:`OpSpec.triton_schema`: ``SymInt`` sizes);
- ``check``: the metadata checks of the arguments (``_contract_checks``), which the kernel
  backends run before any launch;
- ``allocates``: the outputs a caller may leave out (``None`` or not passed), and how a backend
  allocates them; the op then returns that output;
- ``result``: the shapes of what the op returns (fake kernels, for ``torch.compile``), for the
  ops that return new tensors.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _contract_checks as checks
from .errors import LayoutError

__all__ = ["OP_SPECS", "Args", "OpSpec"]

_ARG = re.compile(r"^(?P<type>[A-Za-z\[\]]+)(?P<alias>\(a!\))?(?P<optional>\?)? (?P<name>\w+)$")


class Args:
    """An op's arguments by name, as attributes (``a.kv_pool``) and items (``a["kv_pool"]``).

    Plain attributes, not a ``dict`` subclass with ``__getattr__``: a check reads a dozen
    arguments per call, and each such read first failed the normal lookup (about 1 us a read on
    the eager path). Set one by one with ``setattr``, which Dynamo traces on every torch we run
    (torch 2.11 cannot trace ``__dict__.update``: the compiled-pipeline tests failed on it).
    """

    def __init__(self, items: Iterable[tuple[str, Any]] = (), /, **named: Any) -> None:
        for name, value in items:
            setattr(self, name, value)
        for name, value in named.items():
            setattr(self, name, value)

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

    def __setitem__(self, name: str, value: Any) -> None:
        setattr(self, name, value)


@dataclass(frozen=True)
class OpSpec:
    """One op of the backend contract (``_backend.py`` documents what each computes).

    Attributes:
        name: the op, e.g. ``"materialize"``; the kernels register ``cpkv::<name>_<impl>``.
        schema: ``"(Tensor kv_pool, Tensor slot_page, Tensor(a!) out) -> ()"``.
        check: metadata checks of the bound arguments; raises ``_contract_checks.BadArgs``.
        allocates: output argument -> how to allocate it from the other arguments, for the
            outputs a caller may leave out.
        result: the results' empty tensors from the arguments (ops that return new tensors).
    """

    name: str
    schema: str
    check: Callable[[Args], None] | None = None
    allocates: Mapping[str, Callable[[Args], torch.Tensor]] = field(default_factory=dict)
    result: Callable[[Args], Any] | None = None

    @functools.cached_property
    def params(self) -> tuple[str, ...]:
        """The argument names, in order."""
        return tuple(_ARG.match(a)["name"] for a in self._args())

    @property
    def mutates(self) -> tuple[str, ...]:
        """The arguments the op writes (marked ``(a!)``)."""
        return tuple(_ARG.match(a)["name"] for a in self._args() if _ARG.match(a)["alias"])

    def _args(self) -> list[str]:
        inner = self.schema[1 : self.schema.index(") ->")]
        return [a.strip() for a in inner.split(",")]

    def cuda_schema(self) -> str:
        """The CUDA op's declaration: ``<name>_cuda<schema>`` with aliases ``a``, ``b``..."""
        letters = iter("abcdefgh")
        return f"{self.name}_cuda" + re.sub(r"\(a!\)", lambda _: f"({next(letters)}!)", self.schema)

    def triton_schema(self) -> str:
        """The Triton custom op's schema: sizes ``SymInt`` (they may be symbolic under
        ``torch.compile``), each written argument aliased by its position (``a2!``)."""
        args = []
        for i, arg in enumerate(self._args()):
            arg = re.sub(r"^int\b", "SymInt", arg)
            args.append(arg.replace("(a!)", f"(a{i}!)"))
        return f"({', '.join(args)})" + self.schema[self.schema.index(") ->") + 1 :]

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> Args:
        """The call's arguments by name; outputs of :attr:`allocates` not given are None."""
        names = self.params
        if not kwargs and len(args) == len(names):  # every argument positional: the common call
            return Args(zip(names, args, strict=True))
        if len(args) > len(names) or not set(kwargs) <= set(names[len(args) :]):
            raise TypeError(f"{self.name}{self.schema}: got {len(args)} arguments and {kwargs}")
        bound = dict(zip(names, args, strict=False))
        bound.update(kwargs)
        for name in names[len(args) :]:
            if name not in bound:
                if name not in self.allocates:
                    raise TypeError(f"{self.name}() missing argument {name!r}")
                bound[name] = None
        return Args(bound.items())

    def check_args(self, a: Args, error: type[LayoutError] = LayoutError) -> None:
        """Run :attr:`check`, raising ``error`` (a :class:`LayoutError`) on bad metadata."""
        if self.check is None:
            return
        try:
            self.check(a)
        except checks.BadArgs as exc:
            raise error(str(exc)) from None

    def fake(self, *args: Any) -> Any:
        """A fake (meta) kernel of the op: :attr:`result`'s empty tensors, else None."""
        if self.result is None:
            return None
        return self.result(Args(zip(self.params, args, strict=True)))


def lengths_dtype(prefix_lens: torch.Tensor) -> torch.dtype:
    """The one dtype the kernels take ``prefix_lens`` and ``extend_lens`` in (they read both
    with one index type): ``prefix_lens``' own when it is int32 or int64, else int64."""
    return prefix_lens.dtype if prefix_lens.dtype in (torch.int32, torch.int64) else torch.int64


def _i32(like: torch.Tensor, *shape: int) -> torch.Tensor:
    return like.new_empty(shape, dtype=torch.int32)


def _plan_result(a: Args) -> tuple[torch.Tensor, ...]:
    """``plan_slots``' 12 results (``_backend.py``): pages, 4 lengths, slot table, slot page and
    owner, inverse, used slots, status, info."""
    bsz, width = a.req_pages.shape
    new = _i32
    p, s = a.req_pages, a.max_slots
    lens = (new(p, bsz) for _ in range(4))  # prefix, extend, seq, pages_used
    return (new(p, bsz, width), *lens, new(p, bsz, width), new(p, s), new(p, s),
            new(p, bsz, a.num_pages), new(p, 1), new(p, 1), new(p, 3))  # fmt: skip


def _shard_result(a: Args) -> list[torch.Tensor]:
    """``shard_plan``'s results (``_backend.py``), ``with_layout`` adding the layout."""
    bsz, tokens = len(a.lens) // 2, a.out_cache_loc.shape[0]
    pages = a.req_to_token.new_empty((bsz, a.width), dtype=torch.int32)
    plan = _plan_result(Args(req_pages=pages, max_slots=a.max_slots, num_pages=a.num_pages))

    def new(n: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
        return a.req_to_token.new_empty((n,), dtype=dtype)

    long, s = torch.int64, a.max_slots
    out = [new(3 + a.shard_size), plan[8], new(bsz, long), new(len(a.kept), long),
           new(s + 1, long), new(s), *(new(tokens, long) for _ in range(3))]  # fmt: skip
    if a.with_layout:
        out += [new(s), new(s), new(bsz + 1, long), plan[6], *plan[:6], plan[7], *plan[9:]]
    return out


OP_SPECS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "build_inverse",
            "(Tensor slot_table, Tensor req_pages, int num_pages, Tensor(a!) inverse) -> ()",
            checks.build_inverse,
            allocates={"inverse": lambda a: _i32(a.slot_table, a.slot_table.shape[0], a.num_pages)},
        ),
        OpSpec(
            "materialize",
            "(Tensor kv_pool, Tensor slot_page, Tensor(a!) out) -> ()",
            checks.materialize,
            allocates={
                "out": lambda a: a.kv_pool.new_empty((a.slot_page.shape[0], *a.kv_pool.shape[1:]))
            },
        ),
        OpSpec(
            "fill_current",
            "(Tensor(a!) dense, Tensor current_kv, Tensor token_req, Tensor out_cache_loc, "
            "Tensor inverse, int page_size) -> ()",
            checks.fill_current,
        ),
        OpSpec(
            "remap_locs",
            "(Tensor locs, Tensor req_id, Tensor inverse, int page_size, Tensor(a!) out) -> ()",
            checks.remap_locs,
            allocates={"out": lambda a: a.locs.new_empty(a.locs.shape, dtype=torch.int32)},
        ),
        OpSpec(
            "current_page_mask",
            "(Tensor req_pages, Tensor prefix_lens, Tensor extend_lens, int page_size, "
            "Tensor(a!) mask) -> ()",
            checks.current_page_mask,
            allocates={
                "mask": lambda a: a.req_pages.new_empty(a.req_pages.shape, dtype=torch.bool)
            },
        ),
        OpSpec(
            "plan_slots",
            "(Tensor req_pages, Tensor prefix_lens, Tensor extend_lens, int page_size, "
            "int num_pages, int max_slots, bool dedup) -> (Tensor, Tensor, Tensor, Tensor, "
            "Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
            checks.plan_slots,
            result=_plan_result,
        ),
        OpSpec(
            "fill_sources",
            "(Tensor token_req, Tensor out_cache_loc, Tensor inverse, int page_size, "
            "int num_slots) -> Tensor",
            checks.fill_sources,
            result=lambda a: _i32(a.inverse, a.num_slots, a.page_size),
        ),
        OpSpec(
            "build_dense",
            "(Tensor kv_pool, Tensor slot_page, Tensor current_kv, Tensor sources, "
            "Tensor? used_slots, Tensor(a!) out) -> ()",
            checks.build_dense,
        ),
        OpSpec(
            "layer_step",
            "(Tensor kv_pool, Tensor slot_page, Tensor current_kv, Tensor sources, "
            "Tensor? used_slots, Tensor(a!) dense, Tensor locs, Tensor row_req, Tensor inverse, "
            "int page_size, Tensor(a!) dense_locs) -> ()",
            checks.layer_step,
        ),
        OpSpec(
            "shard_plan",
            "(Tensor req_to_token, Tensor req_pool_indices, Tensor out_cache_loc, int[] lens, "
            "int[] kept, int width, int page_size, int num_pages, int max_slots, int shard_size, "
            "int shard_rank, int write_base, int trash_page, bool with_layout) -> Tensor[]",
            result=_shard_result,
        ),
    )
}
