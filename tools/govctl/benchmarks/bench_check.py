"""Whole-process time of `govctl check` next to `check-jsonschema` on the same generated items.

Generates N realistic work items (statuses across the lifecycle, journals, criteria, refs,
acyclic depends_on, [[ID]] links, comments) into a scratch repository, then times, as separate
processes and interleaved round by round:

    govctl check -- gov/work/*.toml
    check-jsonschema --schemafile gov/schema/work.schema.json -- gov/work/*.toml

Both validate the same files against the same draft-07 schema with date formats checked;
govctl also runs its lifecycle, date-order, file-name, uniqueness, ref/link and cycle rules.
Goal: govctl no slower than check-jsonschema and under 0.5 s at 1,000 items.

    uv run --frozen --no-sync python tools/govctl/benchmarks/bench_check.py [--runs 15] [--out DIR]

Prints one table; writes govctl.json, govctl.png and govctl.md under --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "gov" / "schema" / "work.schema.json"
GOAL_S = 0.5
# fmt: off
# everything from this line on in govctl.md is kept as it is when the file is re-rendered
KEEP_MARK = "<!-- kept on re-render: sections below are not written by bench_check.py -->"
WORDS = (
    "kernel", "cache", "page", "remap", "inverse", "prefill", "decode", "rank", "token", "layout",
    "index", "fp8", "packing", "backend", "warmup", "scheduler", "request", "batch", "prefix",
    "radix", "gather", "scatter", "torch", "triton", "cuda", "split", "shard", "replica", "config",
    "wheel", "guard", "check", "benchmark", "oracle", "parity",
)
# fmt: on
CATEGORIES = ("added", "changed", "fixed", "chore", "removed", "security", "deprecated")


def _sentence(rng: random.Random, lo: int = 6, hi: int = 16) -> str:
    words = rng.choices(WORDS, k=rng.randint(lo, hi))
    return " ".join(words).capitalize() + "."


def _q(s: str) -> str:
    return json.dumps(s)


def generate(n: int, root: Path, seed: int = 0) -> list[Path]:
    """Write n valid, interlinked work items under root/gov/work; return their paths."""
    rng = random.Random(seed)
    work = root / "gov" / "work"
    work.mkdir(parents=True)
    (root / "gov" / "schema").mkdir()
    shutil.copy(SCHEMA, root / "gov" / "schema" / "work.schema.json")
    (root / "gov" / "config.toml").write_text(
        f'[work_item]\nid_strategy = "random"\n\n[tags]\nallowed = [{", ".join(map(_q, WORDS))}]\n'
    )
    day0, ids, paths, statuses = dt.date(2026, 1, 5), [], [], []
    for i in range(n):
        created = day0 + dt.timedelta(days=i * 300 // n)
        while (wid := f"WI-{created}-{rng.getrandbits(16):04x}") in ids:
            pass
        status = rng.choices(("queue", "active", "done", "cancelled"), (4, 2, 3, 1))[0]
        started = created + dt.timedelta(days=rng.randint(0, 3))
        completed = started + dt.timedelta(days=rng.randint(0, 20))
        title = _sentence(rng, 3, 8)[:-1]
        lines = [
            "#:schema ../schema/work.schema.json",
            "",
            "[govctl]",
            f"id = {_q(wid)}",
            f"title = {_q(title)}",
            f'status = "{status}"',
            f'created = "{created}"',
        ]
        if status in ("active", "done"):
            lines.append(f'started = "{started}"')
        if status in ("done", "cancelled"):
            lines.append(f'completed = "{completed}"')
        if ids and rng.random() < 0.4:
            lines.append(f"refs = [{_q(rng.choice(ids))}]")
        # depends_on only points back in time (acyclic); a done item only on done items (W003)
        deps = [w for w, s in zip(ids, statuses, strict=True) if status != "done" or s == "done"]
        if deps and rng.random() < 0.3:
            lines.append(f"depends_on = [{_q(rng.choice(deps))}]")
        lines.append(f"tags = [{', '.join(_q(t) for t in sorted(set(rng.choices(WORDS, k=2))))}]")
        desc = "\n".join(_sentence(rng) for _ in range(rng.randint(1, 5)))
        if ids and rng.random() < 0.3:
            desc += f"\nFollows [[{rng.choice(ids)}]]."
        lines += ["", "[content]", f'description = """\n{desc}"""']
        if rng.random() < 0.3:
            lines.append(f"notes = [{_q(_sentence(rng))}]")
        if status != "queue":
            end = completed if status != "active" else started + dt.timedelta(days=5)
            for _ in range(rng.randint(0, 4)):
                day = started + dt.timedelta(days=rng.randint(0, (end - started).days))
                lines += [
                    "",
                    "# progress",
                    "[[content.journal]]",
                    f'date = "{day}"',
                    f"scope = {_q(rng.choice(WORDS))}",
                    f'content = """\n{_sentence(rng)}"""',
                ]
        for _ in range(rng.randint(1, 6)):
            st = "done" if status == "done" else rng.choice(("pending", "done", "cancelled"))
            lines += [
                "",
                "[[content.acceptance_criteria]]",
                f"text = {_q(_sentence(rng, 4, 10))}",
                f'status = "{st}"',
                f'category = "{rng.choice(CATEGORIES)}"',
            ]
        path = work / f"{created}-{'-'.join(title.lower().split()[:5])}-{i}.toml"
        path.write_text("\n".join(lines) + "\n")
        ids.append(wid)
        statuses.append(status)
        paths.append(path)
    return paths


def _run(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of one whole process; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        raise SystemExit(f"{shlex.join(cmd[:4])} ... failed ({proc.returncode}):\n{out}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _quantiles(xs: list[float], prefix: str) -> dict[str, float]:
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return {f"{prefix}p50": statistics.median(xs), f"{prefix}p20": q[1], f"{prefix}p80": q[7]}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--runs", type=int, default=15, help="timed runs per provider and size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    tools = {"govctl": bindir / "govctl", "check-jsonschema": bindir / "check-jsonschema"}
    for exe in tools.values():
        if not exe.exists():
            raise SystemExit(f"{exe} not found: run inside the workspace venv (uv run ...)")
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    command = "uv run --frozen --no-sync python tools/govctl/benchmarks/bench_check.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    meta = {
        "cpu": _cpu(),
        "gpu_name": None,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "cuda": None,
        "pkg_version": version("govctl"),
        "check_jsonschema": version("check-jsonschema"),
        "jsonschema": version("jsonschema"),
        "timestamp": stamp,
        "command": command,
        "loadavg_start": os.getloadavg(),  # 1/5/15-minute run-queue length: other jobs' load
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="govctl-bench-") as tmp:
        for n in args.sizes:
            root = Path(tmp) / f"n{n}"
            files = [p.relative_to(root).as_posix() for p in generate(n, root)]
            cmds = {
                "govctl": [str(tools["govctl"]), "check", "--", *files],
                "check-jsonschema": [
                    str(tools["check-jsonschema"]),
                    "--schemafile",
                    "gov/schema/work.schema.json",
                    "--",
                    *files,
                ],
            }
            times: dict[str, list[tuple[float, float]]] = {p: [] for p in cmds}
            for r in range(args.warmup + args.runs):
                order = list(cmds) if r % 2 == 0 else list(reversed(cmds))  # interleave
                for provider in order:
                    t = _run(cmds[provider], root)
                    if r >= args.warmup:
                        times[provider].append(t)
            for provider, ts in times.items():
                rows.append({
                    "op": "check", "provider": provider, "case": f"items={n}", "items": n,
                    **_quantiles([w for w, _ in ts], ""), **_quantiles([c for _, c in ts], "cpu_"),
                    "unit": "s", "runs": len(ts), **meta,
                })  # fmt: skip
    meta["loadavg_end"] = os.getloadavg()
    for row in rows:
        row["loadavg_end"] = meta["loadavg_end"]
    table = _table(rows, args.sizes)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "govctl.json").write_text(json.dumps(rows, indent=2) + "\n")
    _plot(rows, args.out / "govctl.png")
    _markdown(rows, table, meta, args, args.out / "govctl.md")
    print(f"wrote {args.out}/govctl.json, govctl.png, govctl.md")


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except Exception:
        return None


def _table(rows: list[dict], sizes: list[int]) -> str:
    by = {(r["provider"], r["items"]): r for r in rows}
    out = [
        "| items | govctl wall p50 (p20-p80) | govctl CPU | check-jsonschema wall p50 (p20-p80) "
        "| check-jsonschema CPU | wall ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        g, c = by[("govctl", n)], by[("check-jsonschema", n)]
        out.append(
            f"| {n:,} | {g['p50']:.3f} s ({g['p20']:.3f}-{g['p80']:.3f}) | {g['cpu_p50']:.3f} s "
            f"| {c['p50']:.3f} s ({c['p20']:.3f}-{c['p80']:.3f}) | {c['cpu_p50']:.3f} s "
            f"| {g['p50'] / c['p50']:.2f}x |"
        )
    return "\n".join(out)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for provider in ("govctl", "check-jsonschema"):
        rs = sorted((r for r in rows if r["provider"] == provider), key=lambda r: r["items"])
        xs = [r["items"] for r in rs]
        (line,) = ax.plot(xs, [r["p50"] for r in rs], marker="o", label=f"{provider} wall")
        ax.fill_between(xs, [r["p20"] for r in rs], [r["p80"] for r in rs], alpha=0.2)
        ax.plot(
            xs,
            [r["cpu_p50"] for r in rs],
            marker=".",
            linestyle=":",
            color=line.get_color(),
            label=f"{provider} CPU",
        )
    ax.axhline(GOAL_S, color="grey", linestyle="--", linewidth=1, label="goal: 0.5 s")
    ax.set_xscale("log")
    ax.set_xlabel("work items")
    ax.set_ylabel("whole process, median (s)")
    ax.set_title("govctl check vs check-jsonschema (same files, same schema)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _markdown(
    rows: list[dict], table: str, meta: dict, args: argparse.Namespace, path: Path
) -> None:
    big = max(args.sizes)
    g, c = (next(r for r in rows if r["provider"] == p and r["items"] == big)
            for p in ("govctl", "check-jsonschema"))  # fmt: skip
    faster = g["p50"] <= c["p50"]
    lines = [
        f"At {big:,} items `govctl check` takes {g['p50']:.3f} s wall ({g['cpu_p50']:.3f} s CPU), "
        f"{'' if faster else 'NOT '}faster than check-jsonschema's {c['p50']:.3f} s "
        f"({c['cpu_p50']:.3f} s CPU): {c['p50'] / g['p50']:.1f}x by wall time, "
        f"{c['cpu_p50'] / g['cpu_p50']:.1f}x by CPU time.",
        f"Goal < {GOAL_S} s wall: {'met' if g['p50'] < GOAL_S else 'NOT met'} in this run; "
        f"CPU time {g['cpu_p50']:.3f} s {'<' if g['cpu_p50'] < GOAL_S else '>='} {GOAL_S} s.",
    ]
    # sections another script owns (e.g. scripts/check_upstream.py's record) survive a re-render
    kept = path.read_text().partition(KEEP_MARK) if path.is_file() else ("", "", "")
    tail = f"\n{kept[1]}{kept[2]}" if kept[1] else ""
    load0 = ", ".join(f"{x:.1f}" for x in meta["loadavg_start"])
    load1 = ", ".join(f"{x:.1f}" for x in meta["loadavg_end"])
    path.write_text(f"""# govctl check: speed

{" ".join(lines)}

{table}

Whole-process wall time (`subprocess.run`, start to exit) and CPU time (user + sys of the child,
from `getrusage`), median of {args.runs} runs per cell after {args.warmup} warm-up runs,
providers interleaved round by round; wall p20-p80 in brackets. Both tools validate the same
generated files against `gov/schema/work.schema.json` (draft-07, date formats checked); govctl
also runs every lifecycle, date-order, file-name, uniqueness, ref/link and cycle rule
(E011-E023, W001-W003). Wall time on this shared box grows with the other jobs' load; CPU time
does not, so it is the better number to compare across runs.

- date: {meta["timestamp"]}
- machine: {meta["cpu"]}, shared; load average (1, 5, 15 min) {load0} at the start,
  {load1} at the end
- versions: Python {meta["python"]}, govctl {meta["pkg_version"]}, check-jsonschema
  {meta["check_jsonschema"]}, jsonschema {meta["jsonschema"]}
- command: `{meta["command"]}`
- timed, per size, in a generated repository of that many items:
  - `govctl check -- gov/work/*.toml`
  - `check-jsonschema --schemafile gov/schema/work.schema.json -- gov/work/*.toml`
- data: `govctl.json` (one row per provider and size); plot: `govctl.png`

![govctl check vs check-jsonschema](govctl.png)
{tail}""")


if __name__ == "__main__":
    main()
