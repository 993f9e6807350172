"""``indexcache schedule``: print a model's per-layer F/S map and the indexer FLOPs it saves.

    indexcache schedule --layers 78 --freq 4 [--offset 2 | --pattern FFSS...] [--seq-len 65536]
    indexcache schedule --config /models/GLM-5.2 [--seq-len 65536] [--format json]

Exit codes: 0 success, 2 bad input (one line on stderr says which argument, why, and the fix).
Every count is bounded: --layers, --freq, --offset and --nextn at most 4096 (52 times GLM-5's 78
layers), --seq-len at most 2**31 - 1 (the indexer's key window is int32). A reader that closes
stdout early (``| head -1``) ends the output quietly; the exit status stays the command's own;
Ctrl-C is one line and exit 130 (the conventions of ``cpkv_cli``, shared by every cpkv command).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cpkv_cli import InputError, OneLineParser, emit, run

from indexcache._config_file import not_dsa_problem, read_config
from indexcache._flops import IndexerDims, schedule_savings
from indexcache._limits import INT32_MAX, MAX_LAYERS
from indexcache._schedule import (
    DEFAULT_FREQ,
    DEFAULT_OFFSET,
    IndexerSchedule,
    schedule_from_config,
)
from indexcache.errors import IndexCacheError

ROW = 20  # layers per line of the F/S map
_LAYERS_WHY = f"a schedule holds at most {MAX_LAYERS} layers, 52 times GLM-5's 78"
# flag -> (lowest, why not lower, highest, why not higher); checked before anything is built
_BOUNDS = {
    "layers": (1, "a model has a layer", MAX_LAYERS, _LAYERS_WHY),
    "freq": (
        1,
        "1 means every layer runs its indexer",
        MAX_LAYERS,
        f"a freq at or above the layer count changes nothing; {_LAYERS_WHY}",
    ),
    "offset": (
        1,
        "an offset <= 0 would make layer 0 shared with nothing to reuse; default 2",
        MAX_LAYERS,
        f"an offset at or above the layer count changes nothing; {_LAYERS_WHY}",
    ),
    "nextn": (0, "a count", MAX_LAYERS, f"real models have 1 NextN layer; {_LAYERS_WHY}"),
    "seq_len": (1, "a prefill has a token", INT32_MAX, "the indexer's key window is int32"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="indexcache", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("schedule", help="per-layer F/S map, full-layer count, FLOPs saved")
    src = s.add_argument_group("schedule (or --config)")
    src.add_argument("--layers", type=int, help="num_hidden_layers (main model)")
    src.add_argument("--freq", type=int, help="index_topk_freq f (default 1)")
    src.add_argument("--offset", type=int, help="index_skip_topk_offset o (default 2)")
    src.add_argument("--pattern", help='index_topk_pattern, e.g. "FFSSSF..." (instead of --freq)')
    src.add_argument("--nextn", type=int, default=0, help="NextN/MTP layers (default 0)")
    src.add_argument("--config", type=Path, help="a model directory or its config.json")
    s.add_argument("--seq-len", type=int, help="also give indexer FLOPs of one prefill this long")
    s.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``indexcache`` console script; returns the exit code (Ctrl-C: one
    line, 130)."""
    return run("indexcache", lambda: _main(argv), errors=(IndexCacheError,))


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _check_bounds(args)
    schedule, dims, label = _resolve(args)
    report = _report(schedule, dims, label, args.seq_len)
    if args.format == "json":
        emit(json.dumps(report, indent=2))
    else:
        emit(_render_text(schedule, report))
    return 0


def _check_bounds(args: argparse.Namespace) -> None:
    for name, (low, low_why, high, high_why) in _BOUNDS.items():
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is not None and value < low:
            raise InputError(f"{flag} must be >= {low} ({low_why}); got {value}.")
        if value is not None and value > high:
            raise InputError(f"{flag} must be <= {high} ({high_why}); got {value}.")


def _resolve(args: argparse.Namespace) -> tuple[IndexerSchedule, IndexerDims, str]:
    flags = [f for f in ("layers", "freq", "offset", "pattern") if getattr(args, f) is not None]
    if args.config is not None:
        if flags or args.nextn:
            extra = flags[0] if flags else "nextn"
            raise InputError(f"--config takes the schedule from config.json; drop --{extra}.")
        file, raw = read_config(args.config)
        sched = schedule_from_config(raw)
        detail = sched.source
        if sched.source == "index_topk_freq":
            detail = _freq_label(raw.get("index_topk_freq"), raw.get("index_skip_topk_offset"))
        try:
            dims = IndexerDims.from_config(raw)
        except IndexCacheError as exc:
            raise InputError(f"{file}: {exc}") from None
        if problem := not_dsa_problem(file, raw):
            raise InputError(problem)
        return sched, dims, f"{args.config} ({detail})"
    if args.pattern is not None:
        if args.freq is not None or args.offset is not None:
            raise InputError("--pattern replaces --freq/--offset; give one or the other.")
        sched = IndexerSchedule.from_pattern(
            args.pattern, num_layers=args.layers, num_nextn_layers=args.nextn
        )
        return sched, IndexerDims(), f"index_topk_pattern={args.pattern}"
    if args.layers is None:
        raise InputError("give --layers (with --freq/--offset), --pattern, or --config.")
    sched = IndexerSchedule.from_freq(
        args.layers, args.freq, args.offset, num_nextn_layers=args.nextn
    )
    return sched, IndexerDims(), _freq_label(args.freq, args.offset)


def _freq_label(freq: int | None, offset: int | None) -> str:
    """``index_topk_freq=F, index_skip_topk_offset=O``, unset values shown as their defaults."""
    freq = DEFAULT_FREQ if freq is None else freq
    offset = DEFAULT_OFFSET if offset is None else offset
    return f"index_topk_freq={freq}, index_skip_topk_offset={offset}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _flop(n: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} FLOP"


def _report(
    schedule: IndexerSchedule, dims: IndexerDims, label: str, seq_len: int | None
) -> dict[str, Any]:
    savings = schedule_savings(schedule, seq_len, dims)
    return {
        "schedule": label,
        "source": schedule.source,
        "num_layers": schedule.num_layers,
        "num_nextn_layers": schedule.num_nextn_layers,
        "pattern": schedule.pattern,
        "full_layers": list(schedule.full_layers),
        "num_full": schedule.num_full,
        "num_shared": schedule.num_shared,
        "next_layer_reuses": [
            schedule.next_layer_reuses(i)
            for i in range(schedule.num_layers + schedule.num_nextn_layers)
        ],
        "indexer_flops_saved_fraction": savings.saved_fraction,
        "seq_len": seq_len,
        "dims": vars(dims) if seq_len is not None else None,
        "indexer_flops_unshared": savings.unshared_flops,
        "indexer_flops_shared": savings.shared_flops,
    }


def _render_text(schedule: IndexerSchedule, r: dict[str, Any]) -> str:
    width = len(str(schedule.num_layers - 1))
    lines = [f"IndexCache schedule: {_count(r['num_layers'], 'layer')} from {r['schedule']}"]
    for start in range(0, schedule.num_layers, ROW):
        end = min(start + ROW, schedule.num_layers)
        chunk = schedule.pattern[start:end]
        groups = " ".join(chunk[i : i + 5] for i in range(0, len(chunk), 5))
        lines.append(f"  layers {start:>{width}}-{end - 1:<{width}}  {groups}")
    lines.append(
        f"full layers: {r['num_full']} of {r['num_layers']}: "
        + ", ".join(map(str, r["full_layers"]))
    )
    lines.append(f"shared layers: {r['num_shared']} (reuse the nearest earlier full layer's top-k)")
    if r["num_nextn_layers"]:
        lines.append(
            f"NextN layers: {r['num_nextn_layers']} (compute on the first pass; reuse the previous "
            f"MTP step's top-k when it is carried)"
        )
    lines.append(
        f"indexer FLOPs saved: {100 * r['indexer_flops_saved_fraction']:.1f}% "
        f"({r['num_shared']} of {_count(r['num_layers'], 'layer')} "
        f"{'skips its' if r['num_shared'] == 1 else 'skip their'} indexer)"
    )
    if r["seq_len"] is not None:
        d = r["dims"]
        lines.append(
            f"one {r['seq_len']:,}-token prefill (hidden {d['hidden_size']}, q_lora_rank "
            f"{d['q_lora_rank']}, {d['index_n_heads']} x {d['index_head_dim']} indexer heads): "
            f"{_flop(r['indexer_flops_unshared'])} unshared -> "
            f"{_flop(r['indexer_flops_shared'])} shared"
        )
    return "\n".join(lines)
