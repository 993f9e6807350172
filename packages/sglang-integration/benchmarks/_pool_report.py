"""Tables and plot of ``bench_shared_kv_pool.py``, drawn from its record's rows alone.

The record times cpkv's code outside SGLang: the plan function and packs ``CpkvSharedKVPool``
calls, on inputs the benchmark builds, with a device copy standing in for the all-gather and
``index_copy_`` standing in for SGLang's stores. No CUDA-graph column: SGLang runs prefill
eager under KV sharding (SGLang 0.5.23's ``handle_kv_cache_sharding`` turns prefill CUDA graphs
off), so a replay time of this step describes no path SGLang runs. The replay rows an earlier
run recorded stay in the JSON, unshown. Needs no GPU (``--render``).
"""

from __future__ import annotations

from collections.abc import Iterable

import benchkit

NAME = "shared-kv-pool"
GOALS = {"plan_us": 100.0, "host_us_per_layer": 30.0}
PACKS = "cpkv ops per layer (both packs)"
UPSTREAM_PACKS = "upstream packs (index_select, latent + index)"
PLAN = "plan_forward (pool, 1 host read)"
PLAN_VARIANTS = (PLAN, "plan_forward until its GPU work is done",
                 "plan_forward on the torch reference ops", "plan_layout (definition)")  # fmt: skip
CASES = {"8x65536+2048": (8, 65536, 2048), "8x16384+2048": (8, 16384, 2048),
         "4x32768+4096": (4, 32768, 4096), "1x65536+2048": (1, 65536, 2048)}  # fmt: skip
#: the layer step's providers: cpkv's packs on the CUDA backend, and the replicated store
STEP, STORE = "cuda", "replicated"


def p50(rows: Iterable[dict], case: str, phase: str, mode: str, **meta: object) -> float | None:
    """The p50 (us) of the row of ``case``, ``phase``, ``mode`` whose meta holds ``meta``."""
    for r in rows:
        if (r["case"], r["phase"], r["mode"]) == (case, phase, mode) and all(
            r["meta"].get(k) == v for k, v in meta.items()
        ):
            return r["p50"]
    return None


def case_label(case: str) -> str:
    """``8x65536+2048`` -> ``8 x (64K + 2K)``."""
    requests, prefix, extend = CASES.get(case) or (None, None, None)
    if requests is None:
        return case
    return f"{requests} x ({prefix // 1024}K + {extend // 1024}K)"


def _num(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _us(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{_num(v, digits)} us"


def _many(values: Iterable[float | None], digits: int = 0) -> str:
    """``a / b / c us``; n/a where a value is missing."""
    return " / ".join(_num(v, digits) for v in values) + " us"


def _cases(rows: list[dict], phases: tuple[str, ...]) -> list[str]:
    seen = {r["case"] for r in rows if r["phase"] in phases}
    return [c for c in CASES if c in seen] + sorted(seen - set(CASES))


def plan_table(rows: list[dict]) -> str | None:
    """The per-forward plan: ``plan_forward`` and its parts, host wall time, one row per case."""
    body = []
    for c in _cases(rows, ("plan", "plan-part")):
        plan = [p50(rows, c, "plan", "host", variant=v) for v in PLAN_VARIANTS]
        part = {v: p50(rows, c, "plan-part", "host", variant=v) for v in (
            "shard_plan (draft_forward)", "host read (.tolist)",
            "checks after the read (finish_forward)", "in one call: shard_plan",
            "in one call: read", "in one call: checks")}  # fmt: skip
        device = p50(rows, c, "plan-part", "device", variant="shard_plan (draft_forward)")
        one_call = list(part.values())[3:]
        body.append([
            case_label(c), f"**{_us(plan[0])}**", _us(plan[1]),
            _many((part["shard_plan (draft_forward)"], device)),
            _us(part["host read (.tolist)"]), _us(part["checks after the read (finish_forward)"]),
            _many(one_call), _us(plan[2]), _us(plan[3]),
        ])  # fmt: skip
    if not body:
        return None
    head = ["case", f"plan_forward, host (goal <= {GOALS['plan_us']:.0f} us)", "+ GPU done",
            "op host / device", "read", "checks", "in one call: op / read / checks",
            "torch reference op", "plan_layout"]  # fmt: skip
    return benchkit.markdown_table(head, body, align="l" + "r" * 8)


def layer_table(rows: list[dict]) -> str | None:
    """The per-layer step on one rank, eager and host; no CUDA-graph column (module doc)."""
    body = []
    for c in _cases(rows, ("layer", "layer-op")):
        body.append([
            case_label(c),
            f"**{_us(p50(rows, c, 'layer-op', 'host', variant=PACKS), 1)}**",
            _us(p50(rows, c, "layer-op", "host", variant=UPSTREAM_PACKS), 1),
            _many((p50(rows, c, "layer", "host", backend=STEP),
                   p50(rows, c, "layer", "host", backend=STORE)), 1),
            _many((p50(rows, c, "layer", "eager", backend=STEP),
                   p50(rows, c, "layer", "eager", backend=STORE)), 1),
        ])  # fmt: skip
    if not body:
        return None
    head = ["case", f"cpkv's two packs, host (goal <= {GOALS['host_us_per_layer']:.0f} us)",
            "`index_select` packs (SGLang's, restated), host",
            "step / one store, host", "step / one store, eager (CUDA events)"]  # fmt: skip
    return benchkit.markdown_table(head, body, align="lrrrr")


def sections(rows: list[dict]) -> dict[str, str]:
    """``{"shared-kv-pool <device> plan": table, "... layer": table}`` per device."""
    out = {}
    for device in dict.fromkeys(benchkit.device_label(r) for r in rows):
        mine = [r for r in rows if benchkit.device_label(r) == device and r["phase"] != "summary"]
        for part, table in (("plan", plan_table(mine)), ("layer", layer_table(mine))):
            if table is not None:
                out[f"{NAME} {device} {part}"] = table
    return out


def figure(rows: list[dict], device: str | None = None) -> benchkit.Figure:
    """The plan's host time, and the layer step eager, per case (one device: the first GPU's)."""
    devices = list(dict.fromkeys(benchkit.device_label(r) for r in rows))
    device = device or next((d for d in devices if d != "cpu"), devices[0] if devices else "cpu")
    mine = [r for r in rows if benchkit.device_label(r) == device]
    plan_cases, layer_cases = _cases(mine, ("plan",)), _cases(mine, ("layer",))

    def line(label: str, cases: list[str], phase: str, mode: str, **meta: object):
        ys = [p50(mine, c, phase, mode, **meta) or 0 for c in cases]
        return benchkit.Line(label, list(range(len(cases))), ys)

    plan_panel = benchkit.Panel(
        f"per-forward plan, host wall time (goal <= {GOALS['plan_us']:.0f} us)", "case",
        "us per forward", [line(v, plan_cases, "plan", "host", variant=v) for v in PLAN_VARIANTS],
        hlines=[benchkit.HLine(GOALS["plan_us"], "goal 100 us")], yscale="log",
        xticks=[case_label(c) for c in plan_cases],
    )  # fmt: skip
    backends = sorted({r["meta"].get("backend") for r in mine if r["phase"] == "layer"} - {None},
                      key=lambda b: (b == STORE, b))  # fmt: skip
    layer_panel = benchkit.Panel(
        "layer step eager: packs, copy for the gather, 2 stores",
        "case", "us per layer (CUDA events)",
        [line("1 store (replicated)" if b == STORE else f"step, {b} packs", layer_cases, "layer",
              "eager", backend=b) for b in backends],
        xticks=[case_label(c) for c in layer_cases],
    )  # fmt: skip
    return benchkit.Figure([plan_panel, layer_panel], title=f"cpkv's ops, no SGLang ({device})")
