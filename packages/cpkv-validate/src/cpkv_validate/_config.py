"""The reference model's shape: a GlmMoeDsa-shaped attention stack, small enough for a CPU.

Field names follow transformers' ``GlmMoeDsaConfig`` so a config maps onto it one to one (the HF
match test builds one from :meth:`ModelConfig.hf_kwargs`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from indexcache import IndexerSchedule

__all__ = ["PRESETS", "ModelConfig", "indexer_types", "schedule"]


def schedule(cfg: ModelConfig) -> IndexerSchedule:
    """The IndexCache schedule of ``cfg`` (``index_topk_freq``/``index_skip_topk_offset``).

    Layer l is full iff ``max(l - offset + 1, 0) % freq == 0``, as transformers' ``GlmMoeDsaConfig``
    derives ``indexer_types``.
    """
    return IndexerSchedule.from_freq(
        cfg.num_hidden_layers, cfg.index_topk_freq, cfg.index_skip_topk_offset
    )


def indexer_types(cfg: ModelConfig) -> tuple[str, ...]:
    """Per-layer ``"full"``/``"shared"`` pattern of ``cfg``."""
    return schedule(cfg).indexer_types


@dataclass(frozen=True)
class ModelConfig:
    """Dimensions of the reference GlmMoeDsa-shaped stack (dense MLP, no MoE).

    The latent KV cache row is ``kv_lora_rank + qk_rope_head_dim`` wide (GLM-5: 512 + 64 = 576);
    full (indexer) layers also cache an ``index_head_dim``-wide indexer key per token.
    """

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 96
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    q_lora_rank: int = 32
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    index_n_heads: int = 8
    index_head_dim: int = 16
    index_topk: int = 24
    index_topk_freq: int = 2
    index_skip_topk_offset: int = 2
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    page_size: int = 16

    def __post_init__(self) -> None:
        if self.qk_rope_head_dim % 2 or self.qk_rope_head_dim > self.index_head_dim:
            raise ValueError(
                f"qk_rope_head_dim={self.qk_rope_head_dim} must be even and <= index_head_dim="
                f"{self.index_head_dim} (the indexer ropes its first qk_rope_head_dim dims)"
            )
        for name in ("num_hidden_layers", "index_topk", "page_size", "index_topk_freq"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def latent_dim(self) -> int:
        """Width of one latent KV cache row: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def indexer_types(self) -> tuple[str, ...]:
        return indexer_types(self)

    def with_(self, **changes: object) -> ModelConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "indexer_types": list(self.indexer_types)}

    def hf_kwargs(self) -> dict[str, object]:
        """Keyword arguments for transformers' ``GlmMoeDsaConfig`` describing the same stack."""
        n = self.num_hidden_layers
        return dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=n,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_attention_heads,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank,
            qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim,
            index_n_heads=self.index_n_heads,
            index_head_dim=self.index_head_dim,
            index_topk=self.index_topk,
            index_topk_freq=self.index_topk_freq,
            index_skip_topk_offset=self.index_skip_topk_offset,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            rms_norm_eps=self.rms_norm_eps,
            first_k_dense_replace=n,
            mlp_layer_types=["dense"] * n,
            attention_bias=False,
            max_position_embeddings=1 << 20,
        )


PRESETS: dict[str, ModelConfig] = {
    # CPU validation: 4 layers, IndexCache freq 2 (F F S F), top-k well below the sequence lengths.
    "tiny": ModelConfig(),
    # GLM-5 attention dimensions per layer (dense MLP kept small: CP does not touch it).
    "glm5": ModelConfig(
        vocab_size=4096,
        hidden_size=6144,
        intermediate_size=2048,
        num_hidden_layers=2,
        num_attention_heads=64,
        q_lora_rank=2048,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        v_head_dim=256,
        index_n_heads=32,
        index_head_dim=128,
        index_topk=2048,
        index_topk_freq=1,
        page_size=64,
    ),
}
