"""Run scenarios on the reference engine: batch N under CP, then each request alone, compare.

Runs on every CP rank (the same Python bookkeeping everywhere; tensors split by the CP layout).
The batch-size-1 golden runs need no CP, so they are spread over the ranks by request and
all-gathered.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._compare import TOLERANCE, RequestResult, ScenarioResult, compare_rows
from ._config import PRESETS, ModelConfig
from ._engine import Engine, Leak
from ._model import init_weights
from ._rt import LocalComm
from ._scenario_text import REST
from ._scenarios import Scenario, build_scenario

__all__ = ["Options", "run_all", "run_scenario"]

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Options:
    """Everything a reference run needs; picklable so CP worker processes receive it.

    ``sglang_offsets``: None, or the RAGGED offset rule the engine models in SGLang's no-prefix
    interleave branch (``upstream``: SGLang 0.5.23's; ``fixed``), see ``_ragged``.
    """

    scenarios: list[str]
    cp: int = 2
    split: str = "zigzag"
    inverse: str = "per-request"
    allocator: str = "free"
    device: str = "cpu"
    dtype: str = "float64"
    seed: int = 0
    backend: str | None = None
    preset: str = "tiny"
    overrides: dict[str, int] = field(default_factory=dict)
    sglang_offsets: str | None = None

    def model_config(self) -> ModelConfig:
        return PRESETS[self.preset].with_(**self.overrides)


def _pages_for(sc: Scenario, p: int) -> int:
    toks = sum(len(t) for s in sc.steps for _, t in s.admit)
    return 2 * (toks // p) + 8 * len(sc.markers) + 16


# Batch-1 results do not depend on cp, split or inverse: runs sharing a process reuse them.
_GOLDEN_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _golden(cfg, w, seed, name, tokens, hit, extends, backend) -> tuple[torch.Tensor, torch.Tensor]:
    """The request alone (batch 1, no CP, no prefix cache), with the same chunking."""
    ref = w["embed_tokens.weight"]
    key = (cfg, seed, ref.dtype, str(ref.device), backend, tuple(tokens), hit, tuple(extends))
    if key not in _GOLDEN_CACHE:
        if len(_GOLDEN_CACHE) > 256:
            _GOLDEN_CACHE.clear()
        _GOLDEN_CACHE[key] = _golden_run(cfg, w, name, tokens, hit, extends, backend)
    return _GOLDEN_CACHE[key]


def _golden_run(cfg, w, name, tokens, hit, extends, backend) -> tuple[torch.Tensor, torch.Tensor]:
    eng = Engine(cfg, w, num_pages=-(-len(tokens) // cfg.page_size) + 2, backend=backend)
    eng.admit(name, tokens)
    if hit:
        eng.step([(name, hit)])
    pos, rows = [], []
    for e in extends:
        out = eng.step([(name, e)])
        pos.append(out.positions[name].cpu())
        rows.append(out.hidden[name].cpu())
    return torch.cat(pos), torch.cat(rows)


def run_scenario(
    sc: Scenario,
    cfg: ModelConfig,
    w: dict[str, torch.Tensor],
    opts: Options,
    comm: object,
    progress: Callable[[str, int], None] | None = None,
) -> ScenarioResult:
    """Run one scenario batched under ``comm``'s CP, then every request alone; compare."""
    eng = Engine(
        cfg,
        w,
        num_pages=_pages_for(sc, cfg.page_size),
        comm=comm,
        split=opts.split,
        inverse=opts.inverse,
        allocator=opts.allocator,
        backend=opts.backend,
        audit=True,
        sglang_offsets=opts.sglang_offsets,
    )
    got_pos: dict[str, list[torch.Tensor]] = {}
    got_rows: dict[str, list[torch.Tensor]] = {}
    leaks: list[Leak] = []
    history, tokens = {}, {}
    conflicts = shared = 0
    for k, step in enumerate(sc.steps):
        for name, toks in step.admit:
            history[name] = eng.admit(name, toks)
            tokens[name] = toks
        batch = _resolve_rest(eng, step.batch)
        shared += _shared_written(eng, batch)
        out = eng.step(batch)
        conflicts += out.legacy_conflicts
        leaks += out.leaks
        for name in out.positions:
            got_pos.setdefault(name, []).append(out.positions[name].cpu())
            got_rows.setdefault(name, []).append(out.hidden[name].cpu())
        for name in step.finish:
            eng.finish(name)
        for name in step.evict:
            eng.evict(name)
        if progress:
            progress(f"{sc.name}: batch step {k + 1}/{len(sc.steps)}", 0)
    if progress:
        progress(f"{sc.name}: golden runs", 1)
    names = list(history)
    mine = {}
    for i, name in enumerate(names):
        if i % comm.world == comm.rank:
            r = history[name]
            pos, rows = _golden(
                cfg, w, opts.seed, name, tokens[name], r.hit, r.extends, opts.backend
            )
            mine[name] = (pos, rows)
    goldens: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for part in comm.all_gather_object(mine):
        goldens.update(part)
    if progress:
        progress(f"{sc.name}: compare", 1)
    tol = TOLERANCE[opts.dtype]
    results = []
    for name in names:
        pos = torch.cat(got_pos[name])
        rows = torch.cat(got_rows[name])
        gpos, grows = goldens[name]
        if not torch.equal(pos, gpos):
            diff, first = float("inf"), int(pos[0])
        else:
            diff, first = compare_rows(rows, grows, pos, tol)
        mine_leaks = [lk for lk in leaks if lk.victim == name]
        sources = sorted({lk.source for lk in mine_leaks})
        bad = diff > tol or bool(mine_leaks)
        results.append(
            RequestResult(
                scenario=sc.name,
                request=name,
                marker=str(sc.markers.get(name, "")),
                rows=int(pos.numel()),
                max_abs_diff=diff,
                first_bad=first,
                verdict="FAIL" if bad else "PASS",
                leak_sources=sources,
                leaks=[
                    {
                        "layer": lk.layer,
                        "kind": lk.kind,
                        "position": lk.position,
                        "source": lk.source,
                    }
                    for lk in mine_leaks
                ],
            )
        )
    return ScenarioResult(
        sc.name,
        sc.description,
        results,
        len(sc.steps),
        conflicts,
        shared,
        cp=comm.world,
        split=opts.split,
        allocator=opts.allocator,
    )


def _resolve_rest(eng: Engine, batch: list[tuple[str, int | None]]) -> list[tuple[str, int]]:
    """Replace ``REST`` extends by what of each prompt is not cached yet."""
    return [
        (n, len(eng.requests[n].tokens) - eng.requests[n].cached if e is REST else e)
        for n, e in batch
    ]


def _shared_written(eng: Engine, batch: list[tuple[str, int]]) -> int:
    """Pages listed by >= 2 requests of the batch and written by at least one of them."""
    p = eng.cfg.page_size
    users: dict[int, list[bool]] = {}
    for name, e in batch:
        r = eng.requests[name]
        for j in range(-(-(r.cached + e) // p)):
            if j < len(r.pages):
                users.setdefault(r.pages[j], []).append(j >= r.cached // p)
    return sum(1 for u in users.values() if len(u) > 1 and any(u))


def run_all(
    opts: Options,
    comm: object | None = None,
    progress: Callable[[str, int], None] | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Run every scenario in ``opts`` on this rank (``comm`` = its CP group; None = cp 1).

    ``on_result`` is called with each scenario's result as soon as it is known (rank 0 prints a
    line per scenario run in a pipe or a log, instead of nothing until the table).
    """
    comm = comm if comm is not None else LocalComm()
    cfg = opts.model_config()
    device = torch.device(opts.device)
    if device.type == "cuda" and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    w = init_weights(cfg, opts.seed, DTYPES[opts.dtype], device)
    out = []
    for name in opts.scenarios:
        # Text seeded by (seed, scenario name): a scenario is the same alone or among others.
        text_seed = opts.seed * 1_000_003 + zlib.crc32(name.encode())
        sc = build_scenario(name, cfg.page_size, text_seed, cfg.vocab_size)
        out.append(run_scenario(sc, cfg, w, opts, comm, progress))
        if on_result is not None:
            on_result(out[-1])
    return out
