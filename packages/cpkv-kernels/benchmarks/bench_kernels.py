"""Every cpkv kernel against the torch reference, side by side in one run (needs a CUDA GPU).

    python packages/cpkv-kernels/benchmarks/bench_kernels.py --out docs/benchmarks

Providers: ``torch`` (cpkv_runtime's torch backend, the reference), ``triton``, ``cuda``, the
obvious plain-torch alternative (``index_select`` / ``index_copy_``) and ``copy`` (a contiguous
device-to-device copy of the same bytes: the bandwidth ceiling). Writes ``cpkv-kernels.json`` and
``cpkv-kernels.png`` under ``--out`` and prints the tables (plain text, then markdown).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch
from _bench_cases import DEV, cases, load_ops
from _harness import Row, env_info, plot_bandwidth, time_eager, time_graph, time_host, write_json


def measure_copy_tbps() -> float:
    """The device-to-device copy ceiling, measured now: 1 GiB, bytes read + written."""
    src = torch.randint(0, 256, (2**30,), dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    p50, _, _ = time_eager(lambda: dst.copy_(src))
    return 2 * 2**30 / (p50 * 1e-6) / 1e12


def run(quick: bool, command: str) -> tuple[dict[str, object], list[Row], dict[str, object]]:
    torch.manual_seed(0)
    env = env_info(command)
    ops = load_ops()
    copy_tbps = measure_copy_tbps()
    rows: list[Row] = []
    for op, case, meta, setup in cases(quick):
        try:
            provs, nbytes, parity = setup(ops)
        except Exception as exc:
            print(
                f"SKIPPED {op} {case}: setup failed: {type(exc).__name__}: {exc}", file=sys.stderr
            )
            continue
        for prov, fn in provs.items():
            for mode, timer in (("eager", time_eager), ("graph", time_graph), ("host", time_host)):
                try:
                    p50, p20, p80 = timer(fn)
                    note = ""
                except Exception as exc:  # e.g. the torch reference syncs and cannot be captured
                    p50 = p20 = p80 = None
                    note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                tbps = nbytes / (p50 * 1e-6) / 1e12 if p50 else None
                rows.append(
                    Row(
                        op,
                        case,
                        prov,
                        mode,
                        p50,
                        p20,
                        p80,
                        bytes_moved=nbytes,
                        tbps=tbps,
                        parity=parity.get(prov),
                        note=note,
                        meta=dict(meta),
                    )
                )
        del provs
        torch.cuda.empty_cache()
        print(f"done {op} {case}: parity {parity}", file=sys.stderr, flush=True)
    return env, rows, {"copy_tbps": copy_tbps}


def _get(rows: list[Row], op: str, case: str, prov: str, mode: str) -> Row | None:
    return next(
        (r for r in rows if (r.op, r.case, r.provider, r.mode) == (op, case, prov, mode)), None
    )


def _us(r: Row | None) -> str:
    return "n/a" if r is None or r.p50 is None else f"{r.p50:.1f}"


def table(rows: list[Row], mode: str, copy_tbps: float, markdown: bool) -> str:
    head = [
        "op",
        "case",
        "torch us",
        "triton us",
        "cuda us",
        "alt us",
        "copy us",
        "cuda x torch",
        "triton x torch",
        "cuda TB/s (% copy)",
        "triton TB/s (% copy)",
        "parity",
    ]
    lines = []
    for op, case in dict.fromkeys((r.op, r.case) for r in rows):
        g = {
            p: _get(rows, op, case, p, mode)
            for p in ("torch", "triton", "cuda", "index_select", "index_copy_", "copy")
        }
        alt = g["index_select"] or g["index_copy_"]
        t, c, tr = g["torch"], g["cuda"], g["triton"]

        def ratio(a: Row | None, b: Row | None) -> str:
            return f"{a.p50 / b.p50:.1f}x" if a and b and a.p50 and b.p50 else "n/a"

        def bw(r: Row | None, op: str = op) -> str:
            if r is None or not r.tbps or op not in ("materialize", "fill_current", "remap_locs"):
                return "-"
            return f"{r.tbps:.2f} ({100 * r.tbps / copy_tbps:.0f}%)"

        ok = "yes" if c and tr and c.parity and tr.parity else "NO"
        lines.append(
            [
                op,
                case,
                _us(t),
                _us(tr),
                _us(c),
                _us(alt),
                _us(g["copy"]),
                ratio(t, c),
                ratio(t, tr),
                bw(c),
                bw(tr),
                ok,
            ]
        )
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(out + ["| " + " | ".join(line) + " |" for line in lines])
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = lambda xs: "  ".join(str(x).ljust(w) for x, w in zip(xs, widths, strict=True))  # noqa: E731
    return "\n".join([fmt(head), *map(fmt, lines)])


def goals(rows: list[Row], copy_tbps: float) -> dict[str, object]:
    """Where each op stands against its performance goal."""
    bw = {
        f"{r.op} {r.case} {r.provider} {r.mode}": round(r.tbps / copy_tbps, 3)
        for r in rows
        if r.mode in ("eager", "graph")
        and r.op in ("materialize", "fill_current")
        and r.provider in ("cuda", "triton")
        and r.tbps
        and r.bytes_moved / 2 >= 64 * 2**20
    }
    remap = {}
    for prov in ("cuda", "triton"):
        k, c = (
            _get(rows, "remap_locs", "[16384,2048] int32 B=8", prov, "eager"),
            _get(rows, "remap_locs", "[16384,2048] int32 B=8", "copy", "eager"),
        )
        if k and c and k.p50 and c.p50:
            remap[prov] = round(k.p50 / c.p50, 2)
    speedup = {}
    for op, case in dict.fromkeys((r.op, r.case) for r in rows):
        for mode in ("eager", "graph"):
            t, c = _get(rows, op, case, "torch", mode), _get(rows, op, case, "cuda", mode)
            if t and c and t.p50 and c.p50:
                speedup[f"{op} {case} {mode}"] = round(t.p50 / c.p50, 1)
    return {
        "bw_fraction_of_copy_ge_64MiB": bw,
        "remap_16k_x_2048_vs_int32_copy": remap,
        "cuda_speedup_vs_torch": speedup,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/benchmarks", help="directory for the JSON and PNG")
    parser.add_argument("--quick", action="store_true", help="fewer sizes")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    env, rows, summary = run(args.quick, command)
    copy_tbps = float(summary["copy_tbps"])
    summary["goals"] = goals(rows, copy_tbps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "cpkv-kernels.json", env, rows, summary)
    plot_bandwidth(out / "cpkv-kernels.png", rows, copy_tbps, ("materialize", "fill_current"))
    print(
        f"{env['gpu_name']} torch {env['torch']} triton {env['triton']} | "
        f"D2D copy {copy_tbps:.2f} TB/s"
    )
    for mode in ("eager", "graph", "host"):
        print(f"\n[{mode}] p50, us\n" + table(rows, mode, copy_tbps, markdown=False))
    for mode in ("eager", "graph", "host"):
        print(f"\n[{mode}] markdown\n" + table(rows, mode, copy_tbps, markdown=True))
    print("\ngoals:", summary["goals"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
