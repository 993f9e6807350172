"""``cpkv-serve``'s own flags, split from SGLang's, and their translation into SGLang arguments.

The IndexCache flags become ``--json-model-override-args`` keys: they then travel inside the
server arguments to every scheduler process, where the plugin's ``get_config`` hook turns them
into the per-layer schedule. ``--cpkv-shared-kv`` becomes SGLang's ``--enable-kv-cache-sharding``
plus ``CPKV_SHARED_KV=1`` in the environment SGLang's processes inherit (the plugin then installs
the shared-KV pool). Everything else on the command line is SGLang's.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from cpkv_cli import OneLineParser
from cpkv_cli.environment import READ_BY

from sglang_cpkv.plugin.hooks.indexcache_overrides import INDEXCACHE_KEYS

OVERRIDE_FLAG = "--json-model-override-args"
GPUS = {"sm90": (9, 0), "sm100": (10, 0)}


@dataclass(frozen=True)
class CpkvArgs:
    """What ``cpkv-serve`` itself understood.

    Attributes:
        dry_run: resolve and print instead of serving.
        dry_run_format: ``"text"`` or ``"json"``.
        gpu: ``"sm90"``/``"sm100"`` to resolve for (dry-run only); None = the local GPU.
        index_overrides: IndexCache model overrides, e.g. ``{"index_topk_freq": 4}``.
        sglang_argv: the remaining arguments, for SGLang.
        shared_kv: ``--cpkv-shared-kv`` (KV sharding with cpkv's per-request scratch).
        scratch_batch: dry-run batch shape ``(requests, prefix, extend)`` for the scratch numbers.
        gpu_mem_gib: dry-run GPU memory per rank (None: by ``--gpu``).
    """

    dry_run: bool = False
    dry_run_format: str = "text"
    gpu: str | None = None
    index_overrides: dict[str, object] = field(default_factory=dict)
    sglang_argv: tuple[str, ...] = ()
    shared_kv: bool = False
    scratch_batch: tuple[int, int, int] = (8, 65536, 2048)
    gpu_mem_gib: float | None = None


def parse_batch_shape(text: str) -> tuple[int, int, int]:
    """``"8x65536+2048"`` -> ``(8, 65536, 2048)``: requests x shared prefix + new tokens each."""
    try:
        count, _, rest = text.partition("x")
        prefix, _, extend = rest.partition("+")
        shape = (int(count), int(prefix), int(extend))
    except ValueError:
        shape = (0, -1, 0)
    if shape[0] < 1 or shape[1] < 0 or shape[2] < 1:
        raise argparse.ArgumentTypeError(
            f"batch shape {text!r}: write REQUESTSxPREFIX+EXTEND, e.g. 8x65536+2048 (8 "
            f"requests sharing a 65,536-token prefix, 2,048 new tokens each)"
        )
    return shape


#: Largest ``--cpkv-gpu-mem-gib``: 4 TiB, over ten times the largest GPU memory shipped (B300,
#: 288 GB); a bigger figure is a unit slip (MiB or bytes given as GiB), not a GPU.
MAX_GPU_MEM_GIB = 4096.0


def gpu_mem_gib(text: str) -> float:
    """``--cpkv-gpu-mem-gib``: a finite number of GiB in (0, :data:`MAX_GPU_MEM_GIB`].

    ``-1``, ``0``, ``nan`` and ``inf`` used to be accepted and the capacity figures were
    printed from them.
    """
    try:
        gib = float(text)
    except ValueError:
        gib = math.nan
    if not (math.isfinite(gib) and 0 < gib <= MAX_GPU_MEM_GIB):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a GPU's memory: give GiB per GPU in (0, {MAX_GPU_MEM_GIB:.0f}], "
            f"e.g. 141 (H200) or 180 (B200)"
        )
    return gib


def build_parser() -> argparse.ArgumentParser:
    """The parser for cpkv-serve's own flags (``allow_abbrev=False``: SGLang's flags pass by)."""
    p = OneLineParser(
        prog="cpkv-serve",
        usage="cpkv-serve [sglang serve args] [cpkv flags]",
        description="SGLang's server (sglang serve) with the cpkv plugin active. Every "
        "argument not listed here goes to SGLang (see `sglang serve --help`).",
        allow_abbrev=False,
        add_help=False,
        help_flag="--cpkv-help",  # --help is SGLang's too
        environment=READ_BY["cpkv-serve"],
    )
    p.add_argument("--cpkv-help", action="help", help="show this help and exit")
    g = p.add_argument_group("IndexCache (rebuild the per-layer indexer schedule)")
    g.add_argument(
        "--cpkv-index-topk-freq",
        type=int,
        metavar="F",
        help="every F-th layer runs its indexer (1 = all; default: the checkpoint's)",
    )
    g.add_argument(
        "--cpkv-index-skip-topk-offset",
        type=int,
        metavar="O",
        help="layer l is full iff max(l - O + 1, 0) %% F == 0 (default 2)",
    )
    g.add_argument(
        "--cpkv-index-topk-pattern",
        metavar="FS...",
        help="one letter per layer, F full / S shared; wins over F and O",
    )
    k = p.add_argument_group("shared KV (prefill CP over a sharded KV pool)")
    k.add_argument(
        "--cpkv-shared-kv",
        action="store_true",
        help="shard the KV pool over the prefill-CP ranks (SGLang's --enable-kv-cache-sharding) "
        "with cpkv's per-request scratch; PD prefill node, Mooncake, FlashMLA/Triton/trtllm DSA "
        "backends (the dry run says which combinations run and why)",
    )
    k.add_argument(
        "--cpkv-scratch-batch",
        type=parse_batch_shape,
        default=(8, 65536, 2048),
        metavar="BxPREFIX+EXTEND",
        help="dry run: batch whose scratch to size, B requests sharing PREFIX tokens plus "
        "EXTEND new ones each (default 8x65536+2048)",
    )
    k.add_argument(
        "--cpkv-gpu-mem-gib",
        type=gpu_mem_gib,
        metavar="GIB",
        help="dry run: memory per GPU for the capacity numbers (default: the local GPU; "
        "141 for --gpu sm90 (H200), 180 for --gpu sm100 (B200))",
    )
    d = p.add_argument_group("dry run (no GPU, no weights: a directory with config.json is enough)")
    d.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve the server arguments and print what would run, then exit",
    )
    d.add_argument("--gpu", choices=sorted(GPUS), help="GPU to resolve for (default: this one)")
    d.add_argument("--dry-run-format", choices=["text", "json"], default="text")
    return p


def parse_cpkv_args(argv: Sequence[str]) -> CpkvArgs:
    """Split ``argv`` into cpkv-serve's flags and SGLang's, validating cpkv's.

    Raises:
        SystemExit: bad cpkv flags (argparse's usage error, exit status 2).
    """
    parser = build_parser()
    ns, rest = parser.parse_known_args(list(argv))
    if ns.gpu and not ns.dry_run:
        parser.error("--gpu only applies to --dry-run (a real server uses the GPUs it runs on)")
    # --cpkv-<key> sets the model override <key> (dest cpkv_<key>)
    given = {key: getattr(ns, f"cpkv_{key}") for key in INDEXCACHE_KEYS}
    overrides: dict[str, object] = {k: v for k, v in given.items() if v is not None}
    try:
        validate_index_overrides(overrides)
    except ValueError as err:
        given = " ".join(f"--cpkv-{k.replace('_', '-')} {v}" for k, v in overrides.items())
        parser.error(f"{given}: {err}")
    return CpkvArgs(
        ns.dry_run,
        ns.dry_run_format,
        ns.gpu,
        overrides,
        tuple(rest),
        shared_kv=ns.cpkv_shared_kv,
        scratch_batch=ns.cpkv_scratch_batch,
        gpu_mem_gib=ns.cpkv_gpu_mem_gib,
    )


SHARDING_FLAG = "--enable-kv-cache-sharding"


def with_sharding(sglang_argv: Sequence[str]) -> list[str]:
    """``sglang_argv`` with SGLang's ``--enable-kv-cache-sharding`` (added once)."""
    argv = list(sglang_argv)
    return argv if SHARDING_FLAG in argv else [*argv, SHARDING_FLAG]


def validate_index_overrides(overrides: dict[str, object]) -> None:
    """Validate values with :mod:`indexcache` (the layer count is checked once the config loads).

    Raises:
        indexcache.ScheduleError: a value is invalid.
    """
    if not overrides:
        return
    from indexcache import IndexerSchedule

    if "index_topk_pattern" in overrides:
        IndexerSchedule.from_pattern(overrides["index_topk_pattern"])  # type: ignore[arg-type]
    IndexerSchedule.from_freq(
        1,
        overrides.get("index_topk_freq"),
        overrides.get("index_skip_topk_offset"),  # type: ignore[arg-type]
    )


def merge_model_overrides(sglang_argv: Sequence[str], extra: dict[str, object]) -> list[str]:
    """Return ``sglang_argv`` with ``extra`` merged into ``--json-model-override-args``.

    Raises:
        ValueError: the existing value is not a JSON object, sets one of the keys to another
            value, or sets ``indexer_types`` (which would take priority over the flags).
    """
    argv = list(sglang_argv)
    if not extra:
        return argv
    idx, current = None, {}
    for i, arg in enumerate(argv):
        if arg == OVERRIDE_FLAG and i + 1 < len(argv):
            idx, text = i, argv[i + 1]
        elif arg.startswith(OVERRIDE_FLAG + "="):
            idx, text = i, arg.split("=", 1)[1]
        else:
            continue
        current = json.loads(text) if text.strip() else {}
        if not isinstance(current, dict):
            raise ValueError(f"{OVERRIDE_FLAG} must be a JSON object; got {text!r}")
    if "indexer_types" in current:
        raise ValueError(
            f"{OVERRIDE_FLAG} sets indexer_types, which takes priority over "
            f"--cpkv-index-*; drop one of them"
        )
    clash = {k: (current[k], v) for k, v in extra.items() if k in current and current[k] != v}
    if clash:
        raise ValueError(
            f"{OVERRIDE_FLAG} and --cpkv-index-* disagree on "
            + ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in clash.items())
        )
    merged = json.dumps({**current, **extra})
    if idx is None:
        return [*argv, OVERRIDE_FLAG, merged]
    if argv[idx] == OVERRIDE_FLAG:
        argv[idx + 1] = merged
    else:
        argv[idx] = f"{OVERRIDE_FLAG}={merged}"
    return argv
