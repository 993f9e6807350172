"""Served-model numbers, side by side in one run: plain SGLang against ``cpkv-serve`` on one GPU.

Three servers on the same checkpoint, same arguments, one after another on the same GPU:
``sglang`` (SGLang's launcher, the cpkv plugin kept out through ``SGLANG_PLUGINS``), ``cpkv``
(``cpkv-serve``, every always-on hook) and ``cpkv-f4`` (``cpkv-serve --cpkv-index-topk-freq 4``).
For each it measures, from the client (wall clock, medians):

- ``ready``: launch to ``/v1/models`` answering (the process start, SGLang's import, the plugin's
  load and checks in every process, weights, KV pool);
- ``ttft``: one prompt of 1K, 8K and 32K tokens (the tiny model's tokenizer is one token per
  byte), ``max_new_tokens`` 1, radix cache flushed before each, after one unmeasured prompt of
  the same length (kernel compilation);
- ``short``: a 32-token prompt, 1 new token: the per-request cost, where a hook's overhead shows;
- ``batch8``: 8 concurrent requests of 1K tokens generating 128 tokens each (``ignore_eos``):
  output tokens per second.

Usage: ``python3 bench_serve.py --out DIR [--model DIR] [--reps N]`` writes
``DIR/serve-bench.json``;
``python3 bench_serve.py --report DIR/serve-bench.json --docs docs/benchmarks`` renders the table
(``serve-table.md``, for ``serve.md``) and the plot (``serve.png``) where matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _serve_launch import CPKV_SERVE, NO_PLUGINS, PLAIN, base_args, flush_cache, launch, post

PROMPT_TOKENS = (1024, 8192, 32768)
#: bf16 KV: SGLang (and the plugin, which keeps a consistent pair) picks FA3 for decode on SM90;
#: the serve carry has no FA3 (1.75 GB), so bf16 decodes on FlashMLA's sparse kernel.
BF16_DECODE = ["--dsa-decode-backend", "flashmla_sparse"]
SERVERS = {
    "sglang": (PLAIN, [], NO_PLUGINS),
    "cpkv": (CPKV_SERVE, [], {}),
    "cpkv-f4": (CPKV_SERVE, ["--cpkv-index-topk-freq", "4"], {}),
}


def prompt(n: int, rng: random.Random) -> str:
    """``n`` printable ASCII bytes: ``n`` tokens for the byte-level tiny tokenizer."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n))


def timed_generate(url: str, text: str, new: int) -> tuple[float, dict]:
    body = {
        "text": text,
        "sampling_params": {"max_new_tokens": new, "temperature": 0, "ignore_eos": True},
    }
    t0 = time.perf_counter()
    out = post(url + "/generate", body)
    return time.perf_counter() - t0, out


def measure(srv, reps: int, rng: random.Random) -> list[dict]:
    rows = [{"metric": "ready", "case": "launch", "value": srv.ready_s, "unit": "s"}]
    for n in PROMPT_TOKENS:
        timed_generate(srv.url, prompt(n, rng), 1)  # compiles this length's kernels
        times = []
        for _ in range(reps):
            flush_cache(srv)
            times.append(timed_generate(srv.url, prompt(n, rng), 1)[0])
        rows.append(
            {"metric": "ttft", "case": f"{n // 1024}K", "value": statistics.median(times),
             "all": times, "unit": "s"}
        )  # fmt: skip
    short = [timed_generate(srv.url, prompt(32, rng), 1)[0] for _ in range(4 * reps)]
    rows.append({"metric": "short", "case": "32 tokens, 1 new", "value": statistics.median(short),
                 "all": short, "unit": "s"})  # fmt: skip
    texts = [prompt(1024, rng) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        t0 = time.perf_counter()
        outs = list(pool.map(lambda t: timed_generate(srv.url, t, 128)[1], texts))
        wall = time.perf_counter() - t0
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    rows.append({"metric": "batch8", "case": "8 x (1K + 128)", "value": tokens / wall,
                 "tokens": tokens, "wall_s": wall, "unit": "tok/s"})  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> int:
    out = args.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.model is None:
        from glm_config import write_tiny_checkpoint

        folder = Path(tempfile.mkdtemp(prefix="tiny-glm51-"))
        args.model = write_tiny_checkpoint(folder, weights=True)
    base = [*base_args(args.model), *BF16_DECODE]
    rows: list[dict] = []
    for name, (command, extra, env) in SERVERS.items():
        rng = random.Random(0)  # every server gets the same prompts
        try:
            with launch(name, command, [*base, *extra], log_dir=out / "logs", env=env) as srv:
                for row in measure(srv, args.reps, rng):
                    rows.append({"server": name, **row})
                    print(f"bench-serve: {name:8s} {row['metric']:6s} {row['case']:18s} "
                          f"{row['value']:10.4f} {row['unit']}", flush=True)  # fmt: skip
        except Exception as exc:  # a server that died or answered an error: the others still run
            print(f"bench-serve: {name}: {type(exc).__name__}: {exc}", flush=True)
        (out / "serve-bench.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def report(path: Path, docs: Path) -> int:
    """The side-by-side table (markdown) and a bar plot from a recorded run: this script's
    ``serve-bench.json`` (a list of rows) or the docs' record of it (``{"rows": [...], ...}``)."""
    recorded = json.loads(path.read_text())
    rows = recorded["rows"] if isinstance(recorded, dict) else recorded
    servers = list(dict.fromkeys(r["server"] for r in rows))
    cases = list(dict.fromkeys((r["metric"], r["case"], r["unit"]) for r in rows))
    value = {(r["server"], r["metric"], r["case"]): r["value"] for r in rows}
    head = "| metric | case | " + " | ".join(servers) + " | cpkv / sglang |"
    lines = [head, "|" + " --- |" * (len(servers) + 3)]
    for metric, case, unit in cases:
        cells = [value.get((s, metric, case)) for s in servers]
        shown = [f"{v:.3f} {unit}" if v is not None else "—" for v in cells]
        ratio = value.get(("cpkv", metric, case)), value.get(("sglang", metric, case))
        rel = f"{ratio[0] / ratio[1]:.3f}" if None not in ratio else "—"
        lines.append(f"| {metric} | {case} | " + " | ".join(shown) + f" | {rel} |")
    table = "\n".join(lines)
    print(table)
    (docs / "serve-table.md").write_text(table + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, metric in zip(axes, ("ttft", "short", "batch8"), strict=True):
        mcases = [c for m, c, _ in cases if m == metric]
        width = 0.8 / len(servers)
        for k, s in enumerate(servers):
            ys = [value.get((s, metric, c), 0) for c in mcases]
            ax.bar([i + k * width for i in range(len(mcases))], ys, width, label=s)
        ax.set_xticks([i + width for i in range(len(mcases))], mcases)
        unit = next((u for m, _, u in cases if m == metric), "")
        ax.set_title(f"{metric} ({unit})" if mcases else f"{metric}: not measured")
    axes[0].legend()
    fig.suptitle("tiny GLM-5.1-shaped model, one GPU: plain SGLang vs cpkv-serve")
    fig.tight_layout()
    fig.savefig(docs / "serve.png", dpi=110)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="directory for serve-bench.json and server logs")
    p.add_argument("--model", type=Path, help="checkpoint folder (default: the tiny GLM-5.1 one)")
    p.add_argument("--reps", type=int, default=3, help="measured prompts per TTFT case")
    p.add_argument("--report", type=Path, help="render a recorded serve-bench.json instead")
    p.add_argument("--docs", type=Path, default=Path("docs/benchmarks"))
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server via finally
    if args.report:
        return report(args.report, args.docs)
    if args.out is None:
        p.error("--out DIR is needed to run (or --report FILE to render)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
