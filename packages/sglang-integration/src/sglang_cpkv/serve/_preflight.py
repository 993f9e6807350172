"""Everything ``cpkv-serve`` refuses before it imports SGLang, each refusal one line.

In order: unknown ``--cpkv-*`` flags, the plugin's hook switches (``CPKV_DISABLE_HOOKS``, the
debug plants ``CPKV_DEBUG_*``), SGLang's parallel sizes (arithmetic only), what
``--cpkv-shared-kv`` needs of them and of the installed release (more than one attention-CP
rank; SGLang's sharded KV pool), ``--json-model-override-args``, every other SGLang argument's
name, value count, type and choices (``_sglang_options``), the model path and its
config.json with the overrides applied (``_model_check``), the IndexCache flags against the
model's layers; then ``_machine`` checks the sizes against what the machine holds.

Bounds, each from something real:

- parallel sizes are integers >= 1 (``--node-rank`` and ``--base-gpu-id`` >= 0);
  ``--attn-cp-size`` is in ``1..tp`` and divides ``tp``. SGLang 0.5.23 documents no other value
  (its help: "The attention context parallelism size", default 1): without prefill CP it divides
  by 0, and under DSA prefill CP it silently reads 0, like 1, as ``tp / attention dp``. So 0 is
  refused, and ``--dry-run`` says when 1 was widened that way;
- the IndexCache flags: ``--cpkv-index-topk-freq`` and ``--cpkv-index-skip-topk-offset`` in
  ``1..num_hidden_layers`` of the model (a larger value gives the same schedule as the layer
  count), a pattern of exactly one letter per layer (``indexcache`` checks it); ``MAX_LAYERS`` when
  the config is not on this machine (a repo id not yet downloaded);
- the machine: ``_machine``.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cpkv_cli import InputError, printable

from sglang_cpkv.errors import CpkvSGLangError, SharedKVError
from sglang_cpkv.plugin._releases import (
    SHARED_KV_FIRST,
    TESTED,
    check_shared_kv_release,
    shared_kv_release_problem,
)
from sglang_cpkv.plugin._version_guard import installed_sglang_version
from sglang_cpkv.serve._model_check import (
    MAX_LAYERS,
    ModelSource,
    architecture,
    check_hub,
    config_problems,
    int_problem,
    is_dsa_config,
    locate_model,
    read_config,
)
from sglang_cpkv.serve._sglang_argv import SGLangArgs, positional_model_path, read_sglang_args
from sglang_cpkv.serve._sglang_options import check_sglang_argv

INDEXCACHE_HOOK = "indexcache-overrides"
_AT_LEAST_ONE = {
    "tp_size": "the GPUs one model replica is split over",
    "pp_size": "pipeline stages",
    "dp_size": "data-parallel replicas",
    "attn_dp_size": "attention data-parallel groups",
    "nnodes": "nodes",
    "gpu_id_step": "the step between the GPU ids of a node",
}


@dataclass(frozen=True)
class Checked:
    """What passed the checks.

    Attributes:
        args: SGLang's checked arguments.
        model: where ``--model-path`` points.
        config: its config.json with ``--json-model-override-args`` applied; None when the config
            is not on this machine (a repo id not cached) or not a config.json (Mistral, GGUF).
        hooks: the plugin hooks that will be registered.
    """

    args: SGLangArgs
    model: ModelSource
    config: dict[str, Any] | None
    hooks: tuple[str, ...]


def preflight(
    index_flags: Mapping[str, object],
    sglang_argv: Sequence[str],
    cpkv_flags: Sequence[str],
    *,
    shared_kv: bool = False,
) -> Checked:
    """Every check of this module but the machine's.

    Args:
        index_flags: the ``--cpkv-index-*`` values, as IndexCache override keys.
        sglang_argv: SGLang's arguments (cpkv's flags removed).
        cpkv_flags: every option string cpkv-serve knows, for "did you mean".
        shared_kv: ``--cpkv-shared-kv`` was given.

    Raises:
        InputError: the first problem found.
        SharedKVError: ``--cpkv-shared-kv`` cannot run here (every reason known before SGLang's
            import, in one line).
    """
    check_cpkv_flags_known(sglang_argv, cpkv_flags)
    hooks = check_hooks(index_flags, shared_kv=shared_kv)
    args = read_sglang_args(sglang_argv)
    check_parallel(args)
    if shared_kv:
        check_shared_kv(args, installed_sglang_version())
    overrides = read_overrides(args)
    check_sglang_argv(positional_model_path(sglang_argv), installed_sglang_version(), cpkv_flags)
    model = locate_model(args.model_path, args.name("model_path"), args.revision)
    if model.kind == "repo":
        check_hub(model, args.name("model_path"), args.revision)
    config = None
    if model.config_path is not None:
        config = {**read_config(model.config_path), **overrides}
        if problems := config_problems(config):
            raise InputError(_problems_line(model.config_path, problems, bool(overrides)))
    check_index_flags(index_flags, config, model)
    return Checked(args, model, config, hooks)


def check_cpkv_flags_known(sglang_argv: Sequence[str], known: Sequence[str]) -> None:
    """Refuse an unknown ``--cpkv-*`` flag (SGLang has none; it would refuse it after import)."""
    for token in sglang_argv:
        name = token.split("=", 1)[0]
        if name.startswith("--cpkv-"):
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}?" if close else "cpkv-serve --cpkv-help lists them"
            raise InputError(f"unknown flag {printable(name)}; {hint}")


def check_hooks(index_flags: Mapping[str, object], *, shared_kv: bool = False) -> tuple[str, ...]:
    """The hooks to register; refuse a bad ``CPKV_DISABLE_HOOKS`` or a flag it disables (a
    shared-KV hook under ``--cpkv-shared-kv`` included: the four are one unit), and a debug
    plant asked for wrongly (an unacknowledged ``CPKV_DEBUG_FAULT``, a
    ``CPKV_DEBUG_BREAK_HOOK`` naming no hook): SGLang's every process would refuse it later."""
    from sglang_cpkv.plugin._debug import broken_hook
    from sglang_cpkv.plugin.entry import DISABLE_ENV, SHARED_KV_ENV, enabled_specs

    try:
        # SGLang's processes will see CPKV_SHARED_KV=1 (cli sets it): their hooks, not ours now
        env = {**os.environ, SHARED_KV_ENV: "1"} if shared_kv else None
        names = tuple(spec.name for spec in enabled_specs(env))
        broken_hook(names)
    except CpkvSGLangError as err:
        raise InputError(str(err)) from None
    if index_flags and INDEXCACHE_HOOK not in names:
        raise InputError(
            f"{_flags_need(index_flags)} the {INDEXCACHE_HOOK} hook, which "
            f"{DISABLE_ENV} turns off (SGLang alone keeps every layer's indexer). Fix: drop the "
            f"flag or take {INDEXCACHE_HOOK} out of {DISABLE_ENV}"
        )
    return names


def check_parallel(args: SGLangArgs) -> None:
    """The parallel sizes, by arithmetic alone (the machine comes later)."""
    for dest, meaning in _AT_LEAST_ONE.items():
        value = getattr(args, dest)
        if value < 1:
            raise InputError(f"{args.name(dest)} {value} must be at least 1 ({meaning})")
    for dest in ("node_rank", "base_gpu_id"):
        if getattr(args, dest) < 0:
            raise InputError(f"{args.name(dest)} {getattr(args, dest)} must be at least 0")
    tp, cp = args.tp_size, args.attn_cp_size
    if not 1 <= cp <= tp or tp % cp:
        valid = [d for d in range(1, tp + 1) if tp % d == 0] if tp <= 1024 else None
        zero = " (SGLang documents no 0/auto value)" if cp == 0 else ""
        raise InputError(
            f"{args.name('attn_cp_size')} {cp} is not an attention CP size for "
            f"{args.name('tp_size')} {tp}{zero}; give one that divides it"
            + (f": {', '.join(map(str, valid))}" if valid else "")
        )
    if args.attn_dp_size > tp:
        raise InputError(
            f"{args.name('attn_dp_size')} {args.attn_dp_size} exceeds "
            f"{args.name('tp_size')} {tp}: attention DP groups split the TP group"
        )
    if args.node_rank >= args.nnodes:
        raise InputError(
            f"{args.name('node_rank')} {args.node_rank} must be below "
            f"{args.name('nnodes')} {args.nnodes} (ranks count from 0)"
        )
    if args.nnodes > tp * args.pp_size * args.dp_size:
        raise InputError(
            f"{args.name('nnodes')} {args.nnodes} is more nodes than the "
            f"{tp * args.pp_size * args.dp_size} ranks of tp x pp x dp; give at most "
            f"that many"
        )


#: what ``--cpkv-shared-kv`` needs of the parallel sizes, as the fix says it
_CP_FIX = "run prefill CP over several GPUs (--tp N --enable-prefill-cp --attn-cp-size N, N > 1)"


def check_shared_kv(args: SGLangArgs, version: str | None) -> None:
    """Refuse ``--cpkv-shared-kv`` with one attention-CP rank, or on a release without SGLang's
    sharded KV pool; with both, one line gives both (the first is the user's configuration, and
    installing a newer SGLang alone would not do).

    One rank is: prefill CP off, or ``--attn-cp-size`` 1 where SGLang does not widen it (it
    reads 1 under DSA prefill CP as ``tp / attention dp``). The plugin's gate says the same
    after SGLang's import; on one GPU SGLang's own checks refuse first, naming neither.

    Raises:
        SharedKVError: the reasons, one line.
    """
    if args.enable_prefill_cp and (args.attn_cp_size > 1 or args.tp_size > args.attn_dp_size):
        if version:
            check_shared_kv_release(version)
        return
    release = shared_kv_release_problem(version) if version else None
    has = (
        f"attention CP size 1 ({args.name('attn_cp_size')} {args.attn_cp_size} on "
        f"{args.name('tp_size')} {args.tp_size}"
        + (
            f" with {args.name('attn_dp_size')} {args.attn_dp_size})"
            if args.attn_dp_size > 1
            else ")"
        )
        if args.enable_prefill_cp
        else "prefill CP off (no --enable-prefill-cp)"
    )
    single = f"it shards the KV pool over the attention-CP ranks, and this deployment has {has}"
    if not release:
        raise SharedKVError(
            f"--cpkv-shared-kv {single.removeprefix('it ')}: one rank would hold the whole pool, "
            f"so there is nothing to share. Fix: drop --cpkv-shared-kv, or {_CP_FIX}"
        )
    raise SharedKVError(
        f"--cpkv-shared-kv cannot run here, for two reasons: (1) {single}; (2) it "
        f"{release.removeprefix('--cpkv-shared-kv ')}. Fix: drop --cpkv-shared-kv; to use it, "
        f"{_CP_FIX} on sglang>={SHARED_KV_FIRST},<={TESTED[-1]}"
    )


def read_overrides(args: SGLangArgs) -> dict[str, Any]:
    """``--json-model-override-args`` as a dict.

    Raises:
        InputError: not JSON, or not a JSON object.
    """
    flag, text = args.name("json_model_override_args"), args.json_model_override_args
    try:
        value = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise InputError(
            f"{flag} is not JSON ({exc}); give an object such as '{{\"index_topk_freq\": 4}}'"
        ) from None
    if not isinstance(value, dict):
        raise InputError(f"{flag} must be a JSON object; got a {type(value).__name__}")
    return value


def check_index_flags(
    index_flags: Mapping[str, object], config: Mapping[str, Any] | None, model: ModelSource
) -> None:
    """The ``--cpkv-index-*`` values against the model's layers (see the module docstring)."""
    if not index_flags:
        return
    from indexcache import IndexCacheError, IndexerSchedule

    layers = MAX_LAYERS
    bound_why = f"the most layers cpkv-serve accepts; {model.given} is not on this machine"
    if config is not None:
        if not is_dsa_config(config):
            what = architecture(config) or config.get("model_type") or "this model"
            raise InputError(
                f"{_flags_apply(index_flags)} to DSA models (GLM-5.x, "
                f"DeepSeek-V3.2); {model.given} is {what}, which SGLang runs without a DSA "
                f"indexer. Fix: drop the flag"
            )
        layers, bound_why = config["num_hidden_layers"], f"num_hidden_layers of {model.given}"
    for key in ("index_topk_freq", "index_skip_topk_offset"):
        if key in index_flags and int_problem(index_flags[key], key, layers):
            raise InputError(
                f"{flag_name(key)} must be in [1, {layers}] ({bound_why}); got {index_flags[key]}"
            )
    pattern = index_flags.get("index_topk_pattern")
    if pattern is not None:
        try:
            IndexerSchedule.from_pattern(pattern, num_layers=layers if config else None)  # type: ignore[arg-type]
        except IndexCacheError as err:
            raise InputError(f"{flag_name('index_topk_pattern')}: {err}") from None
        if len(pattern) > layers:  # type: ignore[arg-type]
            raise InputError(
                f"{flag_name('index_topk_pattern')} has {len(pattern)} letters, "  # type: ignore[arg-type]
                f"over {layers} ({bound_why})"
            )


def _flags_need(index_flags: Mapping[str, object]) -> str:
    names = ", ".join(map(flag_name, index_flags))
    return f"{names} {'needs' if len(index_flags) == 1 else 'need'}"


def _flags_apply(index_flags: Mapping[str, object]) -> str:
    names = ", ".join(map(flag_name, index_flags))
    return f"{names} {'applies' if len(index_flags) == 1 else 'apply'}"


def flag_name(key: str) -> str:
    """``index_topk_freq`` -> ``--cpkv-index-topk-freq``."""
    return "--cpkv-" + key.replace("_", "-")


def _problems_line(path: os.PathLike[str] | str, problems: list[str], overridden: bool) -> str:
    where = f"{path}" + (" (with --json-model-override-args applied)" if overridden else "")
    if len(problems) == 1:
        return f"{where}: {problems[0]}"
    listed = " ".join(f"({i}) {p};" for i, p in enumerate(problems, 1)).rstrip(";")
    return f"{where} has {len(problems)} problems: {listed}"
