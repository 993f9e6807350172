"""Which dense DeepGEMM kernels of the running model may stop at one CP rank's rows.

The warmup hook sees only ``(kernel_type, n, k, num_groups, m_list)``. Under DSA prefill CP,
SGLang 0.5.23 runs the attention projections and the indexer on this rank's CP shard, but
all-gathers the FFN input over the attention-CP group, so the dense MLP and the shared expert
run on every rank's rows (see ``docs/design.md``, "DeepGEMM facade and warmup"). A dense
``(N, K)`` is therefore capped only when it is positively one of the model's attention-side
GEMMs (``Rows.CP_LOCAL`` in ``deepgemm_compat.warmup.dsa_attention_shapes``), computed from the
model's config and the attention TP size, and no other GEMM the model may run has the same
``(N, K)``: the dense MLP and the shared expert at every TP SGLang can give them (1, attention
TP, TP), ``kv_b_proj`` and the NextN ``eh_proj``. Everything else keeps SGLang's list, including
FFN GEMMs SGLang happens to run on the rank's rows (``--moe-dense-tp-size 1``, an all-to-all MoE
backend): the hook does not rely on those placements.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Block-FP8 dense kernels (128 and 32 scale blocks) the attention projections run on.
FP8_DENSE = frozenset({"GEMM_NT_F8F8BF16", "GEMM_NT_F8F8BF16_BLOCK32"})


@dataclass(frozen=True)
class ModelShapes:
    """The dense ``(N, K)`` of one model on one rank, by where their rows come from.

    Attributes:
        model: the model's architecture and attention TP, for messages.
        cp_local: ``(N, K)`` -> names of attention-side GEMMs (one CP rank's rows).
        others: ``(N, K)`` -> names of the model's other dense GEMMs (rows not bounded by CP).
        note: why nothing is identified (empty when ``cp_local`` is usable).
    """

    model: str
    cp_local: Mapping[tuple[int, int], str] = field(default_factory=dict)
    others: Mapping[tuple[int, int], str] = field(default_factory=dict)
    note: str = ""

    def identify(self, kernel: str, n: int, k: int) -> tuple[bool, str]:
        """Whether ``(kernel, N, K)`` runs on one CP rank's rows only, and what it is."""
        key = (n, k)
        if self.note:
            return False, self.note
        if kernel not in FP8_DENSE:
            return False, f"{kernel} is not a block-FP8 dense kernel of {self.model}"
        local, other = self.cp_local.get(key), self.others.get(key)
        if local and other:
            return False, f"{local} shares its kernel with {other} (rows not bounded by CP)"
        if local:
            return True, local
        if other:
            return False, f"{other}: may run on more than one CP rank's rows"
        return False, f"N={n} K={k} is not a GEMM {self.model} is known to run on one CP rank"


def _config_fields(hf_config: Any) -> dict[str, Any]:
    from deepgemm_compat.warmup import GLM51

    return {key: getattr(hf_config, key, None) for key in GLM51}


def _names(shapes: list[Any]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], set[str]] = {}
    for s in shapes:
        if not s.kernel.grouped:
            out.setdefault((s.n, s.k), set()).add(s.name)
    return {key: "+".join(sorted(names)) for key, names in out.items()}


def model_shapes(hf_config: Any, *, attn_tp: int, tp: int) -> ModelShapes:
    """Classify the dense GEMMs of ``hf_config`` (a transformers config) on one rank.

    Args:
        hf_config: the model's config as SGLang parsed it.
        attn_tp: attention TP size (``tp / (attn_dp * attn_cp)``).
        tp: TP size.
    """
    from deepgemm_compat.warmup import Rows, dsa_attention_shapes, dsa_ffn_shapes

    arch = (getattr(hf_config, "architectures", None) or ["the model"])[0]
    model = f"{arch} (attention TP {attn_tp})"
    fields = _config_fields(hf_config)
    try:
        attention = dsa_attention_shapes(fields, attn_tp)
        ffn = dsa_ffn_shapes(fields, dense_tp=1, shared_tp=1, ep=1)
    except ValueError as exc:  # not an MLA/DSA MoE layout we can place: identify nothing
        return ModelShapes(model, note=f"cannot place the GEMMs of {model}: {exc}")
    widths = sorted({1, attn_tp, tp})
    for dense_tp, shared_tp in itertools.product(widths, widths):
        try:
            ffn += dsa_ffn_shapes(fields, dense_tp=dense_tp, shared_tp=shared_tp, ep=1)
        except ValueError:  # a width that does not divide: SGLang refuses it too
            continue
    h = fields["hidden_size"]
    not_local = [s for s in attention if s.rows is Rows.GATHERED] + ffn
    others = {(h, 2 * h): "nextn.eh_proj"} | _names(not_local)
    local = _names([s for s in attention if s.rows is Rows.CP_LOCAL])
    return ModelShapes(model, local, others)
