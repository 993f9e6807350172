"""What ``cpkv-serve --dry-run`` prints: the resolved deployment, as a dict and as text.

Sections: backends and why, KV dtype and row layout, CP/parallel layout, whether prefill hits
SGLang's misplaced RAGGED top-k offsets (and whether the fix is active), the IndexCache schedule
(full layers), the DeepGEMM warmup plan (Ms per kernel type), every plugin decision, and the hook
table with each hook's way out (``_hook_table``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sglang_cpkv.plugin import _decisions
from sglang_cpkv.serve import _hook_table as hook_table
from sglang_cpkv.serve._report_plugin import (
    hooks_section,
    pd_mode,
    speculative,
    warmup_as_sglang_runs_it,
)

_FIELDS = (
    "model_path", "tp_size", "attn_dp_size", "attn_cp_size", "ep_size", "enable_prefill_cp",
    "cp_strategy", "disaggregation_mode", "chunked_prefill_size", "page_size", "kv_cache_dtype",
    "attention_backend", "dsa_prefill_backend", "dsa_decode_backend", "enable_two_batch_overlap",
    "speculative_algorithm", "moe_a2a_backend", "moe_runner_backend", "fp8_gemm_runner_backend",
)  # fmt: skip


def kv_row_layout(
    kv_cache_dtype: str, prefill: str | None, decode: str | None, mode: str, lora: int, rope: int
) -> dict[str, Any]:
    """Bytes per token per layer of the MLA KV pool, by SGLang's ``calculate_mla_kv_cache_dim``.

    fp8 is raw (``lora + rope`` fp8 bytes) when the local role's backend is trtllm (either
    side outside PD), else packed (``lora`` fp8 + ``lora/128`` fp32 scales + ``rope`` bf16).
    """
    if kv_cache_dtype != "fp8_e4m3":
        return {"layout": "bf16", "bytes_per_token": (lora + rope) * 2}
    roles = {"prefill": (prefill,), "decode": (decode,)}.get(mode, (prefill, decode))
    if "trtllm" in roles:
        return {"layout": "raw fp8 (trtllm)", "bytes_per_token": lora + rope}
    return {"layout": "packed fp8 (FlashMLA)", "bytes_per_token": lora + lora // 128 * 4 + rope * 2}


def _warmup_section(hf_config: Any, resolved: dict[str, Any], server_args: Any) -> dict[str, Any]:
    from deepgemm_compat.warmup import GLM51, glm51_shapes
    from sglang.srt.arg_groups.overrides import resolution_result

    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes
    from sglang_cpkv.plugin.hooks.deepgemm_warmup import plan, warmup_inputs

    quant = getattr(hf_config, "quantization_config", None) or {}
    if not isinstance(quant, dict) or quant.get("quant_method") != "fp8":
        return {"note": "no block-FP8 GEMMs: DeepGEMM warmup does not apply"}
    inputs = warmup_inputs(server_args)
    tp, dp, cp = resolved["tp_size"], resolved["attn_dp_size"], resolved["attn_cp_size"]
    attn_tp = max(tp // (dp * cp), 1)
    mode = resolved["disaggregation_mode"]
    moe = {"prefill": "contiguous", "decode": "masked"}.get(mode, "both")
    config = {k: getattr(hf_config, k) for k in GLM51 if hasattr(hf_config, k)}
    # SGLang's placement: dense MLP replicated only with --moe-dense-tp-size 1, shared expert
    # replicated with an all-to-all MoE backend
    dense_tp = 1 if resolution_result(server_args, "moe_dense_tp_size") == 1 else tp
    shared_tp = tp if resolved["moe_a2a_backend"] in (None, "none") else 1
    shapes = glm51_shapes(
        attn_tp=attn_tp, dense_tp=dense_tp, shared_tp=shared_tp, ep=resolved["ep_size"], moe=moe,
        config=config,
    )  # fmt: skip
    # rows as the hook decides them for this model, so each line says what the hook will do
    p = plan(shapes, inputs, model_shapes(hf_config, attn_tp=attn_tp, tp=tp))
    kernels: dict[str, dict[str, Any]] = {}
    rows = []
    for e in p.entries:
        shrinks = len(e.after) < len(e.before)
        rows.append({
            "name": e.shape.name, "kernel": e.shape.kernel.value, "n": e.shape.n, "k": e.shape.k,
            "shrinks": shrinks, "ms": len(e.after), "m_max": max(e.after, default=0),
            "sglang_ms": len(e.before), "reason": e.reason,
        })  # fmt: skip
        row = kernels.setdefault(e.shape.kernel.value, {"shapes": 0, "shrink": 0})
        row["shapes"] += 1
        row["sglang_ms"], row["sglang_m_max"] = len(e.before), max(e.before, default=0)
        if shrinks or not row["shrink"]:  # the shrinking shapes' grid when there are any
            row["ms"], row["m_max"], row["reason"] = len(e.after), max(e.after, default=0), e.reason
        row["shrink"] += shrinks
    return {
        "inputs": inputs.__dict__, "dense_m_max": p.dense_m_max, "m_max": p.m_max,
        "m_list_source": p.m_list_source, "forward_tokens": p.cap.forward_tokens,
        "rank_rows": p.cap.rows, "fast_to_chunk_ms": len(p.fast_to_chunk),
        "total_ms": p.after_total, "sglang_total_ms": p.before_total, "kernels": kernels,
        "shapes": rows,
    }  # fmt: skip


def _ragged_offsets_section(
    resolved: dict[str, Any], kv: dict[str, Any], capability: tuple[int, int] | None
) -> dict[str, Any]:
    from sglang_cpkv.plugin._registered import registered_hooks
    from sglang_cpkv.plugin.entry import DISABLE_ENV
    from sglang_cpkv.plugin.hooks.ragged_offsets import ragged_exposure
    from sglang_cpkv.serve._dry_run import local_capability

    cap = capability or local_capability()
    exposure = ragged_exposure(
        enable_prefill_cp=bool(resolved["enable_prefill_cp"]), cp_strategy=resolved["cp_strategy"],
        cp_size=resolved["attn_cp_size"], prefill_backend=resolved["dsa_prefill_backend"],
        kv_layout=kv["layout"], sm_major=cap[0] if cap else None,
        disaggregation_mode=resolved["disaggregation_mode"],
    )  # fmt: skip
    active = "ragged-offsets" in registered_hooks()
    fix = "active (hook ragged-offsets)" if active else f"OFF (ragged-offsets in {DISABLE_ENV})"
    return {"affected": exposure.affected, "reason": exposure.reason, "fix": fix}


def build_report(server_args: Any, capability: tuple[int, int] | None) -> dict[str, Any]:
    """The dry-run report of a resolved ``ServerArgs`` record (JSON-serialisable)."""
    from indexcache import schedule_savings
    from sglang.srt.arg_groups.overrides import model_config_of, resolution_result
    from sglang.srt.configs.model_config import is_deepseek_dsa

    from sglang_cpkv.plugin._version_guard import installed_sglang_version
    from sglang_cpkv.plugin.hooks.indexcache_overrides import effective_schedule

    resolved = {f: resolution_result(server_args, f) for f in _FIELDS}
    if resolved["attn_dp_size"] is None:  # sglang 0.5.20 has no such field; its own rule
        dp_attention = resolution_result(server_args, "enable_dp_attention")
        resolved["attn_dp_size"] = resolution_result(server_args, "dp_size") if dp_attention else 1
    hf = model_config_of(server_args).hf_config
    dsa = is_deepseek_dsa(hf)
    kv = {
        "layout": "not a DSA model, so cpkv's config repair, indexer-sharing and DSA backend hooks "
        "leave it as SGLang resolves it",
        "bytes_per_token": None,
    }
    if dsa:
        kv = kv_row_layout(
            resolved["kv_cache_dtype"], resolved["dsa_prefill_backend"],
            resolved["dsa_decode_backend"], resolved["disaggregation_mode"],
            hf.kv_lora_rank, hf.qk_rope_head_dim,
        )  # fmt: skip
    report: dict[str, Any] = {
        "sglang": installed_sglang_version(),
        "gpu": {"capability": list(capability) if capability else None},
        "model": {
            "path": resolved["model_path"],
            "architecture": hf.architectures[0],
            "num_hidden_layers": hf.num_hidden_layers,
        },
        "hooks": hooks_section(),
        "resolved": resolved,
        "kv_cache": {"dtype": resolved["kv_cache_dtype"], "page_size": resolved["page_size"], **kv},
    }
    if dsa:
        report["ragged_offsets"] = _ragged_offsets_section(resolved, kv, capability)
        schedule = effective_schedule(hf)
        report["indexcache"] = {
            "num_layers": schedule.num_layers, "num_full": schedule.num_full,
            "full_layers": list(schedule.full_layers), "pattern": schedule.pattern,
            "saved_fraction": schedule_savings(schedule).saved_fraction,
        }  # fmt: skip
    report["warmup"] = (
        _warmup_section(hf, resolved, server_args)
        if dsa
        else {"note": "the warmup plan knows the GEMM shapes of DSA models only"}
    )
    report["warmup"] = warmup_as_sglang_runs_it(report["warmup"], report["hooks"]["on"])
    report["decisions"] = [d.__dict__ for d in _decisions.decisions()]
    report["hook_table"] = hook_table.rows(report["hooks"]["on"])
    return report


def _debug_fault_lines(fault: dict[str, Any] | None) -> list[str]:
    """The debug fault, right under the hooks, loud: this server answers wrongly on purpose."""
    if not fault:
        return []
    return [
        f"  DEBUG FAULT {fault['name']} ON (CPKV_DEBUG_FAULT, acknowledged), hooks "
        f"{', '.join(fault['hooks'])}: {fault['effect']}. Answers are wrong on purpose."
    ]


def _nk(shape: dict[str, Any]) -> str:
    return f"{shape['name']} (N {shape['n']}, K {shape['k']})"


def render_text(r: dict[str, Any]) -> str:
    """The report as aligned plain text."""
    res, kv, gpu = r["resolved"], r["kv_cache"], r["gpu"]["capability"]
    why = defaultdict(list)
    for d in r["decisions"]:
        why[d["topic"]].append(f"{d['message']} ({d['reason']})")
    sm = f"SM{gpu[0]}{gpu[1]} (emulated)" if gpu else "local GPU"
    cp = f"on, {res['cp_strategy']}" if res["enable_prefill_cp"] else "off"
    out = [
        f"cpkv-serve --dry-run: {r['model']['architecture']} ({r['model']['num_hidden_layers']} "
        f"layers) from {r['model']['path']} on {sm}, sglang {r['sglang']}",
        f"  cpkv hooks: {', '.join(r['hooks']['on']) or 'none'}"
        + (
            f"; off: {', '.join(r['hooks']['off'])} (CPKV_DISABLE_HOOKS)"
            if r["hooks"]["off"]
            else ""
        ),
        *_debug_fault_lines(r["hooks"].get("debug_fault")),
        "",
        "Backends",
        f"  attention {res['attention_backend']}; DSA prefill {res['dsa_prefill_backend']}, "
        f"DSA decode {res['dsa_decode_backend']}",
        *(f"  why: {w}" for w in why["dsa-backends"]),
        "KV cache",
        f"  {kv['dtype']}, page size {kv['page_size']}, {kv['layout']}"
        + (f": {kv['bytes_per_token']} B/token/layer" if kv["bytes_per_token"] else ""),
        "Parallelism",
        f"  tp {res['tp_size']}, attention dp {res['attn_dp_size']}, attention cp "
        f"{res['attn_cp_size']} (prefill CP {cp}), "
        f"ep {res['ep_size']}, PD {pd_mode(res['disaggregation_mode'])}, chunked prefill "
        f"{res['chunked_prefill_size']}, speculative {speculative(res['speculative_algorithm'])}",
        *(f"  note: {n}" for n in r.get("notes", ())),
    ]
    if "ragged_offsets" in r:
        ro = r["ragged_offsets"]
        state = f"affected, fix {ro['fix']}" if ro["affected"] else "not affected"
        out += ["CP top-k offsets", f"  {state}: {ro['reason']}"]
    if "indexcache" in r:
        ic = r["indexcache"]
        out += [
            "IndexCache",
            f"  {ic['num_full']}/{ic['num_layers']} layers run the indexer "
            f"({ic['saved_fraction']:.1%} of indexer FLOPs saved): full layers {ic['full_layers']}",
            *(f"  why: {w}" for w in why["indexcache"] + why["config"]),
            f"  two-batch overlap: {'on' if res['enable_two_batch_overlap'] else 'off'}"
            + "".join(f"; {w}" for w in why["tbo"]),
        ]
    w = r["warmup"]
    out.append("DeepGEMM warmup")
    if "kernels" in w:
        out.append(
            f"  {w['total_ms']} kernel Ms in all (SGLang: {w['sglang_total_ms']}); it applies to "
            f"the GEMMs DeepGEMM runs (fp8 GEMM runner {res['fp8_gemm_runner_backend']}, MoE "
            f"runner {res['moe_runner_backend']})"
        )
        if w.get("hook") == "off":
            out.append("  cpkv's deepgemm-warmup hook is off: SGLang warms its own list")
        rows = w["rank_rows"]
        out.append(
            f"  SGLang's list from {w['m_list_source']}; forwards up to {w['forward_tokens']} "
            f"tokens" + (f", a CP rank runs at most {rows} rows" if rows is not None else "")
        )
        for name, k in sorted(w["kernels"].items()):
            some = f"{k['shrink']} of " if 0 < k["shrink"] < k["shapes"] else ""
            out.append(
                f"  {name}: {some}{k['shapes']} shapes {k['ms']} Ms up to {k['m_max']} per shape "
                f"(SGLang: {k['sglang_ms']} up to {k['sglang_m_max']}); {k['reason']}"
            )
            if some:  # which shapes shrink and which keep SGLang's grid
                mine = [s for s in w["shapes"] if s["kernel"] == name]
                kept = [s for s in mine if not s["shrinks"]]
                out.append("    shrink: " + ", ".join(_nk(s) for s in mine if s["shrinks"]))
                out.append(
                    f"    keep SGLang's {k['sglang_ms']} Ms: "
                    + ", ".join(_nk(s) for s in kept)
                    + f"; {kept[0]['reason']}"
                )
    else:
        out.append(f"  {w['note']}")
    if "hook_table" in r:
        out += hook_table.text(r["hook_table"])
    return "\n".join(out) + "\n"
