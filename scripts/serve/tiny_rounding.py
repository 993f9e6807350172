"""Does a change of rounding flip the tiny checkpoint's confident greedy tokens, with and without
fp8 KV? Real transformers on CPU, ``cpkv-validate``'s own prompts.

The serve suite's harness calls a batch's first differing token a leak unless the two runs'
top-two logprob gaps there add up to at most its drift margin (0.1 nats). On the H100 the fp8
configuration showed one confident difference that nothing attributed to another request. This
runs the served checkpoint (``write_tiny_checkpoint``, ``TINY_SHARPEN``) greedily in fp32 and in
bf16, each with and without fp8 rounding of the MLA latent KV, and reports where each pair first
differs and whether the harness's own rule (``cpkv_validate._drift.compare_runs``) would call that
a leak (a "confident flip"). No batching and no plugin are
involved: a confident flip here is rounding alone.

The fp8 rounding is SGLang's fp8 DSA cache's: the 512-wide latent (after ``kv_a_layernorm``)
stored as e4m3 with one scale per 128 values (absmax / 448); the 64 rope values stay 16-bit. It
is applied to every token's latent as it is made, which is what the attention then reads.

Usage: ``uv run --frozen python scripts/serve/tiny_rounding.py [--prompts 8] [--tokens 12]
[--seed N] [--runs NAME...] [--json FILE]``. About 4 x 5 minutes on one core at the defaults.
``--seed`` picks cpkv-validate's prompts for that seed; with ``--runs bf16+fp8kv`` the narrowest
top-two gap per prompt says whether a seed's prompts meet a near-tie early (where a served fp8
comparison has too few tokens of evidence). Exit 2 with one line for bad
input.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

TILE = 128  # values per fp8 scale in SGLang's fp8 DSA cache
E4M3_MAX = 448.0
RUNS = ("fp32", "bf16", "fp32+fp8kv", "bf16+fp8kv")
PAIRS = (
    ("fp32", "bf16"),
    ("fp32+fp8kv", "bf16+fp8kv"),
    ("bf16", "bf16+fp8kv"),
    ("fp32", "fp32+fp8kv"),
)


def fp8_round(x):
    """``x`` (..., D) through e4m3 with one absmax scale per ``TILE`` values of its last axis,
    back in its own dtype. ``D`` must be a multiple of ``TILE``."""
    import torch

    shape = x.shape
    tiles = x.float().reshape(*shape[:-1], shape[-1] // TILE, TILE)
    scale = tiles.abs().amax(-1, keepdim=True).clamp_min(1e-12) / E4M3_MAX
    back = (tiles / scale).to(torch.float8_e4m3fn).float() * scale
    return back.reshape(shape).to(x.dtype)


def with_fp8_latent(model):
    """``model`` with every attention's latent KV rounded by :func:`fp8_round` as it is made."""
    for layer in model.model.layers:
        layer.self_attn.kv_a_layernorm.register_forward_hook(lambda _m, _i, out: fp8_round(out))
    return model


def greedy(model, tokenizer, prompt: str, n: int) -> tuple[list[int], list[float]]:
    """``n`` greedy tokens and the top-two logprob gap at each."""
    import torch

    ids = torch.tensor([tokenizer.encode(prompt).ids])
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, output_scores=True,
            return_dict_in_generate=True,
        )  # fmt: skip
    top2 = [s[0].float().log_softmax(-1).topk(2).values for s in out.scores]
    return out.sequences[0, ids.shape[1] :].tolist(), [float(v[0] - v[1]) for v in top2]


def first_differences(a: list, b: list, margin: float) -> list[dict]:
    """Per prompt where runs ``a`` and ``b`` first differ: position, both gaps, and whether
    cpkv-validate's drift rule (``compare_runs``, rule ``margin``) would call it a leak."""
    from cpkv_validate._drift import MARGIN, compare_runs

    rows = []
    for i, ((ta, ga), (tb, gb)) in enumerate(zip(a, b, strict=True)):
        c = compare_runs(ta, tb, len(ta), rule=MARGIN, epsilon=margin,
                         reference_margins=ga, other_margins=gb)  # fmt: skip
        if c.first is not None:
            k = c.first
            rows.append({"prompt": i, "token": k, "gaps": [round(ga[k], 3), round(gb[k], 3)],
                         "confident": not c.drift})  # fmt: skip
    return rows


def run(prompts: int, tokens: int, seed: int = 0, names: list[str] | None = None) -> dict:
    import torch
    import transformers
    from cpkv_validate._http import make_prompts
    from cpkv_validate._limits import DRIFT_EPSILON
    from glm_config import TINY_SHARPEN, write_tiny_checkpoint
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory(prefix="tiny-glm51-") as tmp:  # ~185 MB, gone once loaded
        folder = write_tiny_checkpoint(tmp, weights=True)
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        fp32 = model.eval()
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    makers = {
        "fp32": lambda: fp32,
        "bf16": lambda: bf16,
        "fp32+fp8kv": lambda: with_fp8_latent(copy.deepcopy(fp32)),
        "bf16+fp8kv": lambda: with_fp8_latent(copy.deepcopy(bf16)),
    }
    texts = [p for _, _, p in make_prompts(8, seed)[1]][:prompts]
    answers = {}
    for name in names or RUNS:
        model = makers[name]()
        answers[name] = [greedy(model, tokenizer, t, tokens) for t in texts]
        print(f"tiny-rounding: {name} done", file=sys.stderr, flush=True)
    return {
        "checkpoint": {"sharpen": TINY_SHARPEN},
        "seed": seed,
        "prompts": prompts,
        "tokens": tokens,
        "margin": DRIFT_EPSILON,
        "distinct_answers": {k: len({tuple(t) for t, _ in v}) for k, v in answers.items()},
        # per run and prompt, the narrowest top-two gap over the first ``tokens`` greedy tokens:
        # a served comparison can stop early only where such a gap is within the margin
        "narrowest_gaps": {k: [round(min(g), 3) for _, g in v] for k, v in answers.items()},
        "pairs": {
            f"{a} vs {b}": first_differences(answers[a], answers[b], DRIFT_EPSILON)
            for a, b in PAIRS
            if a in answers and b in answers
        },
    }


def table(result: dict) -> str:
    lines = [
        "| runs | first differences (prompt@token, gaps) | confident flips |",
        "| --- | --- | --- |",
    ]
    for pair, rows in result["pairs"].items():
        seen = ", ".join(
            f"{r['prompt']}@{r['token']} ({r['gaps'][0]}/{r['gaps'][1]})" for r in rows
        )
        lines.append(f"| {pair} | {seen or 'none'} | {sum(r['confident'] for r in rows)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=8, help="of cpkv-validate's 8 (1..8)")
    p.add_argument("--tokens", type=int, default=12, help="greedy tokens per prompt (1..64)")
    p.add_argument("--seed", type=int, default=0, help="cpkv-validate's --seed (its prompts)")
    p.add_argument(
        "--runs", nargs="+", choices=RUNS, help="which runs (default: all four); pairs need both"
    )
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args(argv)
    if not 1 <= args.prompts <= 8 or not 1 <= args.tokens <= 64:
        print("tiny_rounding: --prompts must be 1..8 and --tokens 1..64", file=sys.stderr)
        return 2
    result = run(args.prompts, args.tokens, args.seed, args.runs)
    print(table(result))
    print("distinct answers:", result["distinct_answers"])
    print("narrowest top-two gaps per prompt:", result["narrowest_gaps"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
