"""The bounds every count given to indexcache is held to, each with the reason it is that size.

A bound is checked at the public boundary, before anything of that size is built, so a hostile
config or flag (``num_hidden_layers: 100000000``) is refused in microseconds instead of building a
100M-entry schedule (it once ran for over 10 minutes and reached 2.7 GB).
"""

from __future__ import annotations

from typing import Any

MAX_LAYERS = 4096
"""Most main layers (and, separately, NextN layers) a schedule holds.

The largest DSA model shipped has 78 main layers (GLM-5.x; DeepSeek-V3.2 has 61) and one NextN
layer. A schedule, its F/S map and its JSON report are O(layers), about 30 bytes a layer, so 4096
(52 times GLM-5) keeps every run to milliseconds and a few hundred KB. ``index_topk_freq`` and
``index_skip_topk_offset`` share the bound: any value at or above the layer count gives the same
schedule as the layer count itself (freq: only the layers before the offset are full; offset:
every layer is full), so nothing is lost. They are not bounded by the model's own layer count:
tiny test models cut from a real config keep its freq (2 layers, ``index_topk_freq`` 4).
"""

INT32_MAX = 2**31 - 1
"""Largest token count or model dimension: GPU kernels take them as int32 (the indexer's key window
``ks``/``ke`` is int32 in DeepGEMM's ``fp8_mqa_logits`` and in :func:`indexcache.causal_window`)."""


def show(value: Any) -> str:
    """``value`` for an error message: short, and safe for ints too long to print.

    Python refuses to turn an int of more than 4300 digits into a string (``ValueError``), so such
    an int is named by its size; long strings are cut.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"int of {value.bit_length()} bits (about 10^{int(value.bit_length() * 0.30103)})"
    text = repr(value)
    if len(text) > 60:
        text = f"{text[:40]}... ({len(text)} characters)"
    return f"{type(value).__name__} {text}"
