"""Which ``deep_gemm`` symbol serves each facade operation, for the installed release.

One table, read from the wheels (tests/fixtures/surfaces.json holds the evidence):
the first candidate the module has wins. A ``_C.`` prefix means the symbol exists only on
the compiled module (``deep_gemm._C``), not at the top level.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from packaging.version import Version

from deepgemm_compat import _detect, _load
from deepgemm_compat.errors import UnsupportedFeatureError

RENAMES: dict[str, tuple[str, ...]] = {
    # 0.2.5 removed fp8_paged_mqa_logits / fp8_mqa_logits; only the fp8_fp4_* remain.
    "paged_mqa_logits": ("fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"),
    "mqa_logits": ("fp8_mqa_logits", "fp8_fp4_mqa_logits"),
    "paged_mqa_logits_metadata": ("get_paged_mqa_logits_metadata",),
    "fp8_gemm_nt": ("fp8_gemm_nt", "fp8_fp4_gemm_nt"),
    "grouped_gemm_contiguous": (
        "m_grouped_fp8_gemm_nt_contiguous",
        "m_grouped_fp8_fp4_gemm_nt_contiguous",
    ),
    "grouped_gemm_masked": (
        "fp8_m_grouped_gemm_nt_masked",
        "m_grouped_fp8_gemm_nt_masked",  # alias added in 0.2.0
        "m_grouped_fp8_fp4_gemm_nt_masked",
    ),
    # Top-level from 0.1.4; only on _C in 0.1.1-0.1.3; absent in 0.0.1 and 0.1.0.
    "set_pdl": ("set_pdl", "_C.set_pdl"),
    "get_pdl": ("get_pdl", "_C.get_pdl"),
    # In no published wheel (SGLang probes for them); the facade's context is a no-op then.
    "set_compile_mode": ("set_compile_mode", "_C.set_compile_mode"),
    "get_compile_mode": ("get_compile_mode", "_C.get_compile_mode"),
    "get_num_sms": ("get_num_sms",),
    "set_num_sms": ("set_num_sms",),
    "tma_aligned_scales": ("get_mn_major_tma_aligned_tensor",),
    "mk_alignment": ("get_mk_alignment_for_contiguous_layout",),
}

# Keyword -> first release whose wrapper takes it (for "upgrade to" messages).
ADDED_IN: dict[str, str] = {
    "ensure_zero_padding": "0.1.4",  # inserted before expected_m_for_psum_layout
    "alpha": "0.2.0",
    "epilogue": "0.2.5",
}
# <= 0.1.7 build the unit scale for a bare tensor with torch.Tensor([1.0], dtype=...),
# which raises TypeError: the fp8_fp4_* wrappers reject a plain fp8 q there.
FP8_FP4_PLAIN_Q_FROM = Version("0.2.0")
# 0.0.1-0.1.1's paged-MQA scheduler reads the KV length of a q atom past the batch
# (fixed in 0.1.2's scheduler/paged_mqa_logits.cuh): next_n >= 2 is unsafe there.
PAGED_NEXT_N_FROM = Version("0.1.2")
# <= 0.2.2 hand tensors back through tvm-ffi / DLPack (see _scales.py).
DLPACK_RETURNS_UNTIL = Version("0.2.2")
# The overlap (single-batch-overlap) keywords of SGLang's masked-GEMM call.
OVERLAP_KEYWORDS = ("enable_overlap", "max_block_n", "signal")

Params = Mapping[str, inspect.Parameter]


@dataclass(frozen=True)
class Surface:
    """A loaded ``deep_gemm`` module plus its release, with the lookups the facade needs.

    Symbols and their signatures are looked up once per Surface (``surface()`` keeps one per
    loaded module), not on every facade call: ``inspect.signature`` costs about 20 us.
    """

    module: ModuleType
    version: Version
    _ops: dict[str, str | None] = field(default_factory=dict, init=False, repr=False, compare=False)
    _symbols: dict[str, tuple[Callable[..., Any] | None, Params | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def which(self, op: str) -> str | None:
        """The symbol serving ``op`` (e.g. ``"_C.set_pdl"``), or ``None`` if none exists."""
        if op not in self._ops:
            self._ops[op] = next((n for n in RENAMES[op] if self.symbol(n)[0] is not None), None)
        return self._ops[op]

    def fn(self, op: str) -> Callable[..., Any] | None:
        name = self.which(op)
        return None if name is None else self.symbol(name)[0]

    def require(self, op: str) -> Callable[..., Any]:
        """``fn(op)``, or UnsupportedFeatureError naming the symbols this release lacks."""
        fn = self.fn(op)
        if fn is None:
            raise UnsupportedFeatureError(
                f"sgl-deep-gemm {self.version} has no {' or '.join(RENAMES[op])}"
            )
        return fn

    def params(self, op: str) -> Params | None:
        """The parameters of the symbol serving ``op``; ``None`` if it has no signature."""
        name = self.which(op)
        return None if name is None else self.symbol(name)[1]

    def symbol(self, name: str) -> tuple[Callable[..., Any] | None, Params | None]:
        """The callable ``name`` names (``"_C."`` prefix: on the compiled module) and its
        parameters (``None`` without a signature); ``(None, None)`` if absent."""
        hit = self._symbols.get(name)
        if hit is None:
            fn = self._get(name)
            hit = self._symbols[name] = (fn, None if fn is None else _parameters(fn))
        return hit

    def _get(self, name: str) -> Callable[..., Any] | None:
        obj: Any = self.module
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj if callable(obj) else None


def _parameters(fn: Callable[..., Any]) -> Params | None:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a C entry point without a text signature
        return None


def module_version(module: ModuleType) -> Version:
    """The release of a loaded ``deep_gemm`` (its ``__version__``, else package metadata)."""
    text = getattr(module, "__version__", None)
    if not text:
        text = _detect.collect(check_symbols=False, providers=False).deep_gemm_version or "0.0.0"
    return Version(str(text))


_current: Surface | None = None


def surface() -> Surface:
    """The Surface of the module the facade uses (``load()`` on first use)."""
    global _current
    module = _load._module if _load._module is not None else _load.load()
    s = _current
    if s is None or s.module is not module:
        s = _current = Surface(module, module_version(module))
    return s
