"""Reference lightning indexer in plain PyTorch (CPU and CUDA): scores, causal window, top-k.

Semantics of transformers' ``GlmMoeDsaIndexer`` / ``DeepseekV32Indexer`` after the projections and
RoPE (the part IndexCache shares across layers)::

    logits[m, n] = sum_h weights[m, h] * relu(softmax_scale * q[m, h, :] . k[n, :])
                   for ks[m] <= n < ke[m], else -inf
    topk[m]      = indices of the min(index_topk, N) largest logits[m, :]

``weights`` already holds transformers' ``weights_proj(x) * n_heads**-0.5``; DeepGEMM's
``fp8_mqa_logits`` takes the same ``(q, k, weights, ks, ke)`` layout. The float32 arithmetic follows
transformers op for op (``matmul`` then scale, ``relu``, a ``[1, H] @ [H, N]`` head reduction), so
on the same device the top-k matches its forward bit for bit, including the order of masked picks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexcache.errors import IndexerInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside each function: `import indexcache` is also how schedule-only users
# (glm-config's CLI, the SGLang plugin in every process) get the schedule, and they must not pay
# for importing torch.


def causal_window(
    num_queries: int, num_keys: int, *, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Key window of a prefill chunk whose ``num_queries`` rows are the last of ``num_keys`` keys.

    Returns:
        ``(ks, ke)``: ``(M,)`` int32 each; row m sees keys ``[0, num_keys - num_queries + m + 1)``.
    """
    import torch

    if not 0 < num_queries <= num_keys:
        raise IndexerInputError(
            f"a causal prefill chunk needs 0 < num_queries <= num_keys; got num_queries="
            f"{num_queries}, num_keys={num_keys}. Fix: the keys include the chunk's own tokens."
        )
    ke = torch.arange(num_keys - num_queries + 1, num_keys + 1, dtype=torch.int32, device=device)
    return torch.zeros_like(ke), ke


def indexer_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    ks: torch.Tensor | None = None,
    ke: torch.Tensor | None = None,
) -> torch.Tensor:
    """Index scores of M query rows against N keys (read-only inputs, new output).

    Args:
        q: ``(M, H, D)`` queries after RoPE, any float dtype.
        k: ``(N, D)`` indexer keys after LayerNorm and RoPE (one head, shared by all query heads).
        weights: ``(M, H)`` per-head weights, ``n_heads**-0.5`` already folded in.
        softmax_scale: scale of ``q . k`` before the ReLU; default ``D**-0.5``.
        ks, ke: ``(M,)`` int key window ``[ks[m], ke[m])``; default :func:`causal_window`.

    Returns:
        ``(M, N)`` float32 logits, ``-inf`` outside each row's window. Memory: an ``(M, H, N)``
        float32 intermediate, as in transformers; chunk the rows (:func:`lightning_indexer`).
    """
    ks, ke = _check(q, k, weights, ks, ke)
    return _logits(q, k, weights, softmax_scale, ks, ke)


def indexer_topk(
    logits: torch.Tensor, index_topk: int, *, invalid_index: int | None = None
) -> torch.Tensor:
    """Top-k of index logits, as transformers selects them.

    Args:
        logits: ``(M, N)`` float logits, ``-inf`` where masked.
        index_topk: k; rows keep ``min(index_topk, N)`` entries.
        invalid_index: when set (e.g. -1, SGLang's convention), picks whose logit is ``-inf`` (a
            row with fewer than k visible keys) are replaced by it; None keeps transformers'
            behaviour (arbitrary masked positions, which its attention mask then ignores).

    Returns:
        ``(M, min(index_topk, N))`` int32 key indices, best first.
    """
    _check_topk(index_topk)
    if logits.dim() != 2:
        raise IndexerInputError(f"logits must be (M, N); got shape {tuple(logits.shape)}.")
    return _topk(logits, index_topk, invalid_index)


def lightning_indexer(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    index_topk: int,
    *,
    softmax_scale: float | None = None,
    ks: torch.Tensor | None = None,
    ke: torch.Tensor | None = None,
    chunk_rows: int | None = None,
    invalid_index: int | None = None,
) -> torch.Tensor:
    """Top-k key indices per query row: :func:`indexer_logits` then :func:`indexer_topk`.

    Args:
        q, k, weights, softmax_scale, ks, ke: as :func:`indexer_logits`.
        index_topk: k.
        chunk_rows: process at most this many query rows at a time, bounding the ``(rows, H, N)``
            float32 intermediate (at N = 128K, H = 32: 16 MiB per row); None = all rows at once.
        invalid_index: as :func:`indexer_topk`.

    Returns:
        ``(M, min(index_topk, N))`` int32 indices into ``k``.
    """
    import torch

    ks, ke = _check(q, k, weights, ks, ke)
    _check_topk(index_topk)
    if chunk_rows is not None and not _is_count(chunk_rows):
        raise IndexerInputError(f"chunk_rows must be None or an int >= 1; got {chunk_rows!r}.")
    rows = q.shape[0]
    step = rows if chunk_rows is None else chunk_rows
    out = torch.empty((rows, min(index_topk, k.shape[0])), dtype=torch.int32, device=q.device)
    for r0 in range(0, rows, step):  # inputs checked once above, not per chunk
        r1 = min(r0 + step, rows)
        logits = _logits(q[r0:r1], k, weights[r0:r1], softmax_scale, ks[r0:r1], ke[r0:r1])
        out[r0:r1] = _topk(logits, index_topk, invalid_index)
    return out


def _logits(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    softmax_scale: float | None,
    ks: torch.Tensor,
    ke: torch.Tensor,
) -> torch.Tensor:
    """:func:`indexer_logits` on checked inputs."""
    import torch

    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    scores = torch.nn.functional.relu(
        torch.matmul(q.float(), k.float().transpose(0, 1)) * scale
    )  # (M, H, N)
    logits = torch.matmul(weights.float().unsqueeze(-2), scores).squeeze(-2)  # (M, N)
    cols = torch.arange(k.shape[0], device=k.device)
    visible = (cols >= ks.unsqueeze(-1)) & (cols < ke.unsqueeze(-1))
    return logits.masked_fill(~visible, float("-inf"))


def _topk(logits: torch.Tensor, index_topk: int, invalid_index: int | None) -> torch.Tensor:
    """:func:`indexer_topk` on checked inputs."""
    import torch

    values, indices = logits.topk(min(index_topk, logits.shape[-1]), dim=-1)
    indices = indices.to(torch.int32)
    if invalid_index is not None:
        indices = indices.masked_fill(values == float("-inf"), invalid_index)
    return indices


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_topk(index_topk: object) -> None:
    if not _is_count(index_topk):
        raise IndexerInputError(f"index_topk must be an int >= 1; got {index_topk!r}.")


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    ks: torch.Tensor | None,
    ke: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate shapes/dtypes/devices before any compute; return the key window."""

    if q.dim() != 3:
        raise IndexerInputError(f"q must be (M, H, D); got shape {tuple(q.shape)}.")
    m, h, d = q.shape
    if k.dim() != 2 or k.shape[1] != d:
        raise IndexerInputError(
            f"k must be (N, D) with D = q.shape[2] = {d}; got shape {tuple(k.shape)}. Fix: the "
            f"indexer key has one head of index_head_dim channels."
        )
    if tuple(weights.shape) != (m, h):
        raise IndexerInputError(
            f"weights must be (M, H) = ({m}, {h}); got shape {tuple(weights.shape)}."
        )
    for name, t in (("q", q), ("k", k), ("weights", weights)):
        if not t.is_floating_point():
            raise IndexerInputError(f"{name} must be a float tensor; got dtype {t.dtype}.")
    if k.device != q.device or weights.device != q.device:
        raise IndexerInputError(
            f"q, k and weights must share a device; got {q.device}, {k.device}, {weights.device}."
        )
    if (ks is None) != (ke is None):
        raise IndexerInputError("give both ks and ke, or neither (causal window).")
    if ks is None or ke is None:
        return causal_window(m, k.shape[0], device=q.device)
    for name, t in (("ks", ks), ("ke", ke)):
        if t.shape != (m,) or t.is_floating_point() or t.device != q.device:
            raise IndexerInputError(
                f"{name} must be an ({m},) integer tensor on {q.device}; got shape "
                f"{tuple(t.shape)}, dtype {t.dtype}, device {t.device}."
            )
    return ks, ke
