"""The ``shared_kv`` section of ``cpkv-serve --dry-run --cpkv-shared-kv``: layout, backends and
capacity, from SGLang's resolved settings (no GPU, no weights)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglang_cpkv.plugin.shared_kv._capacity import GIB, ScratchSpec, capacity_report

__all__ = ["draft_layers", "render_shared_kv", "shared_kv_section"]

#: GPU memory assumed for an emulated GPU (H200 on SM90, B200 on SM100); --cpkv-gpu-mem-gib wins.
ASSUMED_GPU_GIB = {9: 141.0, 10: 180.0}
LAYOUT = (
    "cpkv_runtime layout per forward: slots keyed by (request, page); read-only prefix pages "
    "shared by several requests get one slot, pages a request writes a private one. Scratch "
    "slot (x2, one layer each): [gather N x block pages | write pages | trash page]"
)


def _gpu_gib(
    capability: tuple[int, int] | None, override: float | None
) -> tuple[float | None, str]:
    if override is not None:
        return override, "--cpkv-gpu-mem-gib"
    if capability is not None:
        gib = ASSUMED_GPU_GIB.get(capability[0])
        return gib, f"assumed for SM{capability[0]}0" if gib else "unknown GPU"
    import torch

    return torch.cuda.get_device_properties(0).total_memory / GIB, "local GPU"


def _weights_bytes(model_path: str) -> int | None:
    """Checkpoint bytes from ``model.safetensors.index.json`` (None without one)."""
    index = Path(model_path) / "model.safetensors.index.json"
    try:
        return int(json.loads(index.read_text())["metadata"]["total_size"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def shared_kv_section(server_args: Any, capability: tuple[int, int] | None, args: Any) -> dict:
    """Layout, backends and capacity of a resolved shared-KV deployment (JSON-serialisable)."""
    from sglang.srt.arg_groups.overrides import model_config_of, resolution_result
    from sglang.srt.configs.model_config import get_dsa_index_head_dim

    from sglang_cpkv.plugin import _decisions
    from sglang_cpkv.plugin.hooks.indexcache_overrides import effective_schedule
    from sglang_cpkv.serve._report import kv_row_layout

    def get(name: str) -> Any:
        return resolution_result(server_args, name)

    model_config = model_config_of(server_args)
    hf = model_config.hf_config
    latent = kv_row_layout(
        get("kv_cache_dtype"), get("dsa_prefill_backend"), get("dsa_decode_backend"),
        get("disaggregation_mode"), hf.kv_lora_rank, hf.qk_rope_head_dim,
    )  # fmt: skip
    n, tp = int(get("attn_cp_size")), int(get("tp_size"))
    spec = ScratchSpec.for_model(
        context_len=int(model_config.context_len),
        chunked_prefill_size=int(get("chunked_prefill_size")),
        shard_size=n,
        page_size=int(get("page_size")),
        latent_bytes=int(latent["bytes_per_token"]),
        index_head_dim=int(get_dsa_index_head_dim(hf)),
    )
    gpu_gib, gpu_source = _gpu_gib(capability, args.gpu_mem_gib)
    weights = _weights_bytes(str(get("model_path")))
    fraction = float(get("mem_fraction_static"))
    budget = None
    if gpu_gib is not None and weights is not None:
        budget = gpu_gib * GIB * fraction - weights / tp
    section: dict[str, Any] = {
        "layout": LAYOUT,
        "backends": {
            "prefill": get("dsa_prefill_backend"),
            "decode": get("dsa_decode_backend"),
            # the gate runs twice per resolution (SGLang re-checks sharding at the end)
            "why": [
                dict(t)
                for t in dict.fromkeys(
                    tuple(d.__dict__.items()) for d in _decisions.decisions("shared-kv")
                )
            ],
        },
        "memory": {
            "gpu_gib": gpu_gib,
            "gpu_source": gpu_source,
            "mem_fraction_static": fraction,
            "weights_bytes_per_rank": None if weights is None else weights // tp,
        },
        **capacity_report(
            spec,
            layers=int(hf.num_hidden_layers),
            index_layers=effective_schedule(hf).num_full,
            budget_bytes=budget,
            batch=tuple(args.scratch_batch),
            max_running_requests=_int_or_none(get("max_running_requests")),
            draft_layers=draft_layers(get("speculative_algorithm"), hf),
        ),
    }
    return section


def draft_layers(algorithm: Any, hf_config: Any) -> int:
    """The EAGLE draft's KV layers SGLang sizes with the target (its ``eagle_draft_num_layers``:
    the config's ``num_nextn_predict_layers`` for a path-less MTP draft); 0 without EAGLE."""
    if str(algorithm or "").upper() not in ("EAGLE", "NEXTN"):
        return 0
    return int(getattr(hf_config, "num_nextn_predict_layers", 0) or 0)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _size(b: int) -> str:
    return _mib(b) if b >= 1 << 20 else f"{b / 1024:,.1f} KiB"


def _mib(b: int) -> str:
    return f"{b / (1 << 20):,.1f} MiB"


def _over(x: dict, sc: dict) -> str:
    """Which scratch region a batch overflows, in rows: the limit it exceeds, named."""
    page = x["page_bytes"] // sc["row_bytes"]
    over = []
    if x["gathered_pages"] * page > sc["max_prefix_tokens"]:
        over.append(
            f"gathers {x['gathered_pages'] * page:,} rows, the gather region holds "
            f"{sc['max_prefix_tokens']:,}"
        )
    if x["write_pages"] * page > sc["chunk_tokens"]:
        over.append(
            f"writes {x['write_pages'] * page:,} rows, the write region holds "
            f"{sc['chunk_tokens']:,} (--chunked-prefill-size)"
        )
    return "; ".join(over)


def render_shared_kv(s: dict) -> str:
    """The section as text, appended to the dry run's report."""
    sc, b, mem = s["scratch"], s["batch"], s["memory"]
    out = [
        "Shared KV (--cpkv-shared-kv)",
        f"  layout: {s['layout']}",
        f"  backends: prefill {s['backends']['prefill']}, decode {s['backends']['decode']}",
        *(f"  why: {d['message']} ({d['reason']})" for d in s["backends"]["why"]),
        f"  scratch: {sc['max_prefix_tokens']:,} gather + {sc['chunk_tokens']:,} write rows of "
        f"{sc['row_bytes']} B, x2 slots = {_mib(sc['bytes_both_slots'])} per pool"
        + (
            f", x{sc['pools']} pools (target and EAGLE draft) = {_mib(sc['bytes_charged'])}"
            if sc.get("pools", 1) > 1
            else ""
        )
        + " per rank (charged against the KV budget)",
        f"  batch {b['requests']} x {b['prefix']:,}-token shared prefix + {b['extend']:,} new "
        f"tokens each, per layer slot:",
    ]
    for name, label in (
        ("dedup", "cpkv (dedup)"),
        ("no_dedup", "cpkv without dedup"),
        ("sglang", "SGLang's value-keyed plan"),
    ):
        x = s["batch_scratch"][name]
        out.append(
            f"    {label}: {x['gathered_pages']} gathered pages ({x['unique_pages']} distinct), "
            f"{x['write_pages']} write pages = {_mib(x['bytes'])}; all-gather "
            f"{_mib(x['gather_bytes'])} per layer; "
            + ("fits" if x["fits"] else f"does not fit ({_over(x, sc)}): admission defers it")
        )
    gpu = f"{mem['gpu_gib']} GiB ({mem['gpu_source']})" if mem["gpu_gib"] else "unknown"
    out.append(
        f"  KV budget per rank: {gpu} x mem_fraction_static {mem['mem_fraction_static']:.3f} - "
        f"weights/rank {mem['weights_bytes_per_rank'] or 'unknown'}; "
        f"{s['token_bytes_all_layers']:,} B per token over all layers"
        + (f" (the draft's {s['draft_layers']} included)" if s.get("draft_layers") else "")
    )
    if "tokens" in s:
        t = s["tokens"]
        out.append(
            f"  KV tokens per rank: replicated {t['replicated_rows_per_rank']:,} rows "
            f"({t['replicated_tokens_cached']:,} tokens cached); sharded "
            f"{t['sharded_rows_per_rank']:,} rows ({t['sharded_tokens_cached']:,} tokens cached "
            f"by the {s['scratch']['shard_size']} CP ranks together)"
        )
    else:
        per_gib = GIB // s["token_bytes_all_layers"]
        out.append(
            "  KV tokens per rank: the weights are unknown (no model.safetensors.index.json in "
            f"--model-path); per GiB of KV budget a rank holds {per_gib:,} rows either way: "
            f"replicated they cache {per_gib:,} tokens, sharded "
            f"{per_gib * s['scratch']['shard_size']:,} (after the scratch above)"
        )
    inv = s["inverse"]
    scope = " per GiB of KV budget" if inv["per_gib_of_budget"] else ""
    per_request = (
        f"{inv['logical_pages']:,} logical pages x 4 B ({_size(inv['bytes_per_request'])})"
    )
    if inv["requests"] is None:
        out.append(
            f"  per-request page inverse{scope}: {per_request} per request of a forward, up to "
            f"SGLang's max_running_requests (sized at start-up; pass --max-running-requests to "
            f"bound it here); the pool refuses a larger batch"
        )
    else:
        out.append(
            f"  per-request page inverse{scope}: at most {inv['requests']} requests (SGLang's "
            f"max_running_requests) x {per_request} = {_size(inv['bytes'])} per forward; the "
            f"pool refuses a larger batch"
        )
    return "\n".join(out) + "\n"
