"""Indexer FLOPs of a schedule: what sharing saves.

Per layer, a causal prefill of T new tokens after P cached ones costs

    projections  2 T (q_lora_rank H D + hidden D + hidden H)     (wq_b, wk, weights_proj)
    scoring      2 H (D + 1) (T P + T (T + 1) / 2)               (q . k per head, weighted head sum)

(LayerNorm, RoPE, ReLU and the top-k selection are not counted). A shared layer runs none of it,
so every full layer costs the same and the share saved is ``num_shared / num_layers`` at any length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexcache._limits import INT32_MAX
from indexcache._schedule import IndexerSchedule, _check_int, _get


@dataclass(frozen=True)
class IndexerDims:
    """Indexer sizes; defaults are GLM-5's (hidden 6144, q_lora_rank 2048, 32 heads of 128).

    Each is an int in ``[1, 2**31 - 1]`` (kernels take dimensions as int32).
    """

    hidden_size: int = 6144
    q_lora_rank: int = 2048
    index_n_heads: int = 32
    index_head_dim: int = 128

    def __post_init__(self) -> None:
        for name in ("hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim"):
            _check_int(getattr(self, name), name, minimum=1, maximum=INT32_MAX)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any) -> IndexerDims:
        """Read the four sizes from a config dict or object; missing ones keep the defaults."""
        fields = ("hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim")
        return cls(**{f: v for f in fields if (v := _get(config, f)) is not None})


def indexer_flops(
    num_tokens: int, dims: IndexerDims = IndexerDims(), *, prefix_tokens: int = 0
) -> int:
    """FLOPs of one full layer's indexer for ``num_tokens`` new tokens after ``prefix_tokens``.

    Both counts are at most ``2**31 - 1``: the indexer's key window is int32.
    """
    _check_int(num_tokens, "num_tokens", minimum=1, maximum=INT32_MAX)
    _check_int(prefix_tokens, "prefix_tokens", minimum=0, maximum=INT32_MAX)
    t, p = num_tokens, prefix_tokens
    h, d = dims.index_n_heads, dims.index_head_dim
    proj = 2 * t * (dims.q_lora_rank * h * d + dims.hidden_size * d + dims.hidden_size * h)
    pairs = t * p + t * (t + 1) // 2
    return proj + 2 * h * (d + 1) * pairs


@dataclass(frozen=True)
class Savings:
    """Indexer work of a schedule against running every layer's indexer."""

    num_layers: int
    num_full: int
    per_layer_flops: int | None
    """FLOPs of one full layer at the requested length (None when no length was given)."""

    @property
    def saved_fraction(self) -> float:
        """Share of indexer FLOPs saved: shared layers / layers."""
        return (self.num_layers - self.num_full) / self.num_layers

    @property
    def unshared_flops(self) -> int | None:
        return None if self.per_layer_flops is None else self.per_layer_flops * self.num_layers

    @property
    def shared_flops(self) -> int | None:
        return None if self.per_layer_flops is None else self.per_layer_flops * self.num_full


def schedule_savings(
    schedule: IndexerSchedule, seq_len: int | None = None, dims: IndexerDims = IndexerDims()
) -> Savings:
    """What ``schedule`` saves over the main layers (NextN layers excluded) for one prefill."""
    per_layer = None if seq_len is None else indexer_flops(seq_len, dims)
    return Savings(schedule.num_layers, schedule.num_full, per_layer)
