"""``cpkv-validate``'s arguments checked against reality, before anything is built or spawned.

Every number has a lower and an upper bound with its reason (``_limits``); flags of one engine
are refused with the other; paths, URLs and backends are checked the way they will be used. A
failure is one :class:`InputError` line naming the input, the bound or the fix.
"""

from __future__ import annotations

import argparse
import math
import resource

from cpkv_cli import InputError

from . import _limits as lim
from ._json_target import json_target
from ._scenarios import SCENARIOS, scenario_names
from ._targets import check_url

__all__ = ["DEFAULT_CP", "check_args", "plan"]

#: CP size of the default run for scenarios that name none of their own.
DEFAULT_CP = 2

#: flag -> default, for the flags of one engine only (None on the parser: "not given").
REFERENCE_ONLY = {
    "cp": None,
    "split": None,
    "allocator": None,
    "inverse": "per-request",
    "sglang_offsets": None,
    "scenario": None,
    "device": "cpu",
    "dtype": "float64",
    "backend": "auto",
}
HTTP_ONLY = {
    "model": None,
    "concurrency": 8,
    "requests": None,
    "max_tokens": 32,
    "prefix_words": lim.PREFIX_WORDS,
    "compare_tokens": None,
    "min_compared": lim.MIN_COMPARED,
    "drift_epsilon": lim.DRIFT_EPSILON,
    "timeout": 120.0,
    "max_reply_mib": lim.MAX_REPLY_MIB,
    "api": "auto",
}

# flag -> (lowest, why not lower, highest, why not higher)
_BOUNDS = {
    "seed": (0, "a seed is a non-negative 64-bit integer", lim.MAX_SEED,
             "torch generators and servers take signed 64-bit seeds"),
    "concurrency": (lim.MIN_CONCURRENCY, "a batch test needs two requests in flight at once; "
                    "at 1 nothing overlaps", lim.MAX_CONCURRENCY,
                    "each is a thread and a socket; 1024 fill any batch a server forms"),
    "requests": (2, "a batch needs two requests", lim.MAX_REQUESTS,
                 "the golden run completes them one at a time"),
    "max_tokens": (1, "a completion has a token", lim.MAX_TOKENS,
                   "the check compares a short greedy window"),
    "prefix_words": (0, "a count of words", lim.MAX_PREFIX_WORDS,
                     "half a million tokens is past any served context"),
    "max_reply_mib": (1, "a completion with logprobs needs room", lim.MAX_REPLY_MIB_LIMIT,
                      "a reply is parsed in memory, several times its size"),
}  # fmt: skip


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _show(value: object) -> str:
    """``value`` for a message: ints of hundreds of digits shortened."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def _join(flags: list[str]) -> str:
    return ", ".join(flags)


def _verb(flags: list[str]) -> str:
    return "applies" if len(flags) == 1 else "apply"


def _given(args: argparse.Namespace, flags: dict[str, object]) -> list[str]:
    return [_flag(n) for n in flags if getattr(args, n) is not None]


def check_args(args: argparse.Namespace) -> None:
    """Resolve the engine and defaults in ``args``; raise :class:`InputError` on bad input."""
    if args.engine is None:
        args.engine = "http" if args.url is not None else "reference"
    if args.engine == "http":
        _check_http(args)
    else:
        if args.url is not None:
            raise InputError("--url is for --engine http; drop --engine reference or --url")
        if given := _given(args, HTTP_ONLY):
            raise InputError(
                f"{_join(given)} {_verb(given)} to the http engine only; give --url or drop them"
            )
        _check_reference(args)
    for name in ("seed",):
        _bound(name, getattr(args, name))
    args.json_target = None if args.json is None else json_target(args.json)
    for name, default in {**REFERENCE_ONLY, **HTTP_ONLY}.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _bound(name: str, value: int | None) -> None:
    if value is None:
        return
    low, low_why, high, high_why = _BOUNDS[name]
    if value < low:
        raise InputError(f"{_flag(name)} must be >= {low} ({low_why}); got {_show(value)}")
    if value > high:
        raise InputError(f"{_flag(name)} must be <= {high} ({high_why}); got {_show(value)}")


def _check_http(args: argparse.Namespace) -> None:
    if args.url is None:
        raise InputError(
            "--engine http needs --url URL (the server's base URL, e.g. http://127.0.0.1:30000)"
        )
    check_url(args.url)
    if given := _given(args, REFERENCE_ONLY):
        raise InputError(
            f"{_join(given)} {_verb(given)} to the reference engine only (a server has its own "
            f"layout, CP and scenarios); drop them or --url"
        )
    for name in ("concurrency", "requests", "max_tokens", "prefix_words", "max_reply_mib"):
        _bound(name, getattr(args, name))
    max_tokens = HTTP_ONLY["max_tokens"] if args.max_tokens is None else args.max_tokens
    n = args.compare_tokens
    if n is not None and not 1 <= n <= max_tokens:
        raise InputError(
            f"--compare-tokens must be in 1..--max-tokens ({max_tokens}), got {_show(n)}; "
            f"compare fewer tokens or raise --max-tokens"
        )
    _check_evidence(args, max_tokens if n is None else n)
    t = args.timeout
    if t is not None and not (math.isfinite(t) and 0 < t <= lim.MAX_TIMEOUT_S):
        raise InputError(
            f"--timeout must be a number of seconds in (0, {lim.MAX_TIMEOUT_S:.0f}] (a server "
            f"slower than an hour per request is not serving), got {t}"
        )
    if args.model is not None and (not args.model or not args.model.isprintable()):
        raise InputError(
            f"--model {args.model!r}: give the server's model name (as /v1/models lists it)"
        )
    concurrency = HTTP_ONLY["concurrency"] if args.concurrency is None else args.concurrency
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and concurrency > soft - lim.FD_RESERVE:
        raise InputError(
            f"--concurrency {concurrency} needs a socket per request but the open-file limit is "
            f"{soft} ({lim.FD_RESERVE} kept free); lower --concurrency or raise ulimit -n"
        )


def _check_evidence(args: argparse.Namespace, compared: int) -> None:
    """``--min-compared`` within the tokens compared, ``--drift-epsilon`` a sane gap."""
    least = args.min_compared
    if least is not None and least < 1:
        raise InputError(f"--min-compared must be >= 1 (a token compared); got {_show(least)}")
    if (least or lim.MIN_COMPARED) > compared:
        given = "--compare-tokens" if args.compare_tokens is not None else "--max-tokens"
        raise InputError(
            f"{given} {compared} is below --min-compared {least or lim.MIN_COMPARED} (the fewest "
            f"tokens compared per request that count as evidence); compare more tokens, or "
            f"pass --min-compared {compared} to accept less evidence"
        )
    eps = args.drift_epsilon
    if eps is not None and not (math.isfinite(eps) and 0 <= eps <= lim.MAX_DRIFT_EPSILON):
        raise InputError(
            f"--drift-epsilon must be a gap in nats in [0, {lim.MAX_DRIFT_EPSILON:g}] (0: every "
            f"difference is a leak; a wider gap is no near-tie), got {eps}"
        )


def _check_reference(args: argparse.Namespace) -> None:
    if args.cp is not None and args.cp < 1:
        raise InputError(f"--cp must be >= 1 (1 runs without CP); got {_show(args.cp)}")
    names = scenario_names()
    if args.scenario is not None:
        unknown = [s for s in args.scenario if s not in names]
        if unknown:
            shown = ", ".join(repr(s[:40]) for s in unknown[:3])
            raise InputError(
                f"unknown --scenario {shown}; choose from {', '.join(names)} "
                f"(cpkv-validate --list-scenarios)"
            )
        args.scenario = list(dict.fromkeys(args.scenario))
    device = args.device or REFERENCE_ONLY["device"]
    most = max(plan(args))
    if device == "cpu" and most > lim.MAX_CP_CPU:
        raise InputError(
            f"--cp must be <= {lim.MAX_CP_CPU} on CPU (each rank is a process here, about 30 MiB "
            f"of its own; 16 is twice an 8-GPU node); got {_show(most)}"
        )
    if device == "cuda":
        _check_gpus(most)
    backend = args.backend or REFERENCE_ONLY["backend"]
    if backend != "auto":
        _check_backend(backend, device)


def _check_gpus(most: int) -> None:
    import torch

    if not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible here; use --device cpu")
    visible = torch.cuda.device_count()
    if most > visible:
        raise InputError(
            f"--cp must be <= {visible} with --device cuda (NCCL: one GPU per rank, {visible} "
            f"visible); got {_show(most)}: pass a smaller --cp or leave out the scenarios named "
            f"for a larger cp"
        )


def _check_backend(backend: str, device: str) -> None:
    from cpkv_runtime import available_backends

    found = available_backends().get(backend)
    if found is None or not found.available or device not in found.devices:
        why = found.reason if found is not None and found.reason else f"not for {device}"
        raise InputError(
            f"--backend {backend} is not available here ({why}); use --backend auto or torch"
        )


def plan(args: argparse.Namespace) -> dict[int, list[str]]:
    """cp size -> the scenarios that run at it (``--cp``, else each scenario's own, else 2)."""
    out: dict[int, list[str]] = {}
    for name in args.scenario or scenario_names():
        cp = args.cp if args.cp is not None else (SCENARIOS[name].cp or DEFAULT_CP)
        out.setdefault(cp, []).append(name)
    return out
