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

Prints one table; merges its rows into govctl.json under --out (rows of sizes not run again are
kept), draws govctl.png and rewrites the generated sections of govctl.md (--md; the prose around
them is kept). ``--render`` redraws the PNG and the sections from the JSON without measuring.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import benchkit

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "gov" / "schema" / "work.schema.json"
GOAL_S = 0.5
# fmt: off
# everything from this line on in govctl.md is kept as it is when the file is re-rendered
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


PROVIDERS = ("govctl", "check-jsonschema")


def measure(args: argparse.Namespace, tools: dict[str, Path], env: dict) -> list[dict]:
    """One row per provider and size: whole-process wall and CPU p50/p20/p80, in seconds."""
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
                    t = benchkit.process_times(cmds[provider], cwd=root)
                    if r >= args.warmup:
                        times[provider].append(t)
            for provider, ts in times.items():
                wall = benchkit.quantiles(w for w, _ in ts).to("s")
                cpu = benchkit.quantiles(c for _, c in ts).to("s")
                rows.append({
                    "op": "check", "provider": provider, "case": f"items={n}", "items": n,
                    **wall, **{f"cpu_{k}": cpu[k] for k in ("p50", "p20", "p80")},
                    "runs": len(ts), "warmup": args.warmup, **env,
                })  # fmt: skip
    return rows


def _by_size(rows: list[dict]) -> dict[int, dict[str, dict]]:
    by: dict[int, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["items"], {})[r["provider"]] = r
    return dict(sorted(by.items()))


def table(rows: list[dict], markdown: bool = True) -> str:
    """govctl against check-jsonschema per size: wall p50 (p20-p80), CPU p50, wall ratio."""
    head = [
        "items",
        "govctl wall p50 (p20-p80)",
        "govctl CPU",
        "check-jsonschema wall p50 (p20-p80)",
        "check-jsonschema CPU",
        "wall ratio",
    ]
    lines = []
    for n, by in _by_size(rows).items():
        g, c = by.get("govctl"), by.get("check-jsonschema")
        cells = [f"{n:,}"]
        for r in (g, c):
            if r is None:
                cells += ["n/a", "n/a"]
            else:
                cells += [
                    f"{r['p50']:.3f} s ({r['p20']:.3f}-{r['p80']:.3f})",
                    f"{r['cpu_p50']:.3f} s",
                ]
        cells.append(f"{g['p50'] / c['p50']:.2f}x" if g and c else "n/a")
        lines.append(cells)
    if markdown:
        return benchkit.markdown_table(head, lines, align="rrrrrr")
    return benchkit.text_table(head, lines)


def headline(rows: list[dict]) -> str:
    """The verdict at the largest size timed for both tools: speed and the 0.5 s goal."""
    both = [(n, by) for n, by in _by_size(rows).items() if set(PROVIDERS) <= set(by)]
    if not both:
        return "No size has rows of both tools yet."
    big, by = both[-1]
    g, c = by["govctl"], by["check-jsonschema"]
    faster = g["p50"] <= c["p50"]
    return (
        f"At {big:,} items `govctl check` takes {g['p50']:.3f} s wall ({g['cpu_p50']:.3f} s CPU), "
        f"{'' if faster else 'NOT '}faster than check-jsonschema's {c['p50']:.3f} s "
        f"({c['cpu_p50']:.3f} s CPU): {c['p50'] / g['p50']:.1f}x by wall time, "
        f"{c['cpu_p50'] / g['cpu_p50']:.1f}x by CPU time. "
        f"Goal < {GOAL_S} s wall: {'met' if g['p50'] < GOAL_S else 'NOT met'} in this run; "
        f"CPU time {g['cpu_p50']:.3f} s {'<' if g['cpu_p50'] < GOAL_S else '>='} {GOAL_S} s."
    )


def run_notes(rows: list[dict]) -> str:
    """Date, machine, load, versions, command and repetitions of each run behind the rows."""
    out = []
    runs = {(r["timestamp"], r["command"]): r for r in rows}
    for (stamp, command), r in sorted(runs.items()):
        sizes = sorted(
            {x["items"] for x in rows if (x["timestamp"], x["command"]) == (stamp, command)}
        )
        cpu = r["cpu"] + (f" ({r['cpu_count']} cores)" if r.get("cpu_count") else "")
        load0 = ", ".join(f"{x:.1f}" for x in r["loadavg_start"])
        load1 = ", ".join(f"{x:.1f}" for x in r["loadavg_end"])
        warm = f" after {r['warmup']} warm-up runs" if "warmup" in r else ""
        commit = f", commit {r['git_commit'][:12]}" if r.get("git_commit") else ""
        out += [
            f"- date: {stamp}{commit}; sizes {', '.join(f'{n:,}' for n in sizes)}",
            f"- machine: {cpu}, shared; load average (1, 5, 15 min) {load0} at the start,",
            f"  {load1} at the end",
            f"- versions: Python {r['python']}, govctl {r['pkg_version']}, check-jsonschema",
            f"  {r['check_jsonschema']}, jsonschema {r['jsonschema']}",
            f"- repetitions: median of {r['runs']} runs per cell{warm}, providers interleaved",
            f"- command: `{command}`",
        ]
    return "\n".join(out)


def figure(rows: list[dict]) -> benchkit.Figure:
    """Median whole-process time against items: wall (p20-p80 band) and CPU, per provider."""
    style = {"govctl": "C0", "check-jsonschema": "C1"}

    def provider_style(label: str) -> dict[str, object]:
        return {"color": style.get(label.rsplit(" ", 1)[0])}

    wall = benchkit.lines_from_rows(
        rows, x="items", label=lambda r: f"{r['provider']} wall", band=("p20", "p80"),
        style=provider_style,
    )  # fmt: skip
    cpu = benchkit.lines_from_rows(
        rows, x="items", y="cpu_p50", label=lambda r: f"{r['provider']} CPU",
        style=lambda label: {**provider_style(label), "linestyle": ":", "marker": "."},
    )  # fmt: skip
    panel = benchkit.Panel(
        "govctl check vs check-jsonschema (same files, same schema)",
        "work items",
        "whole process, median (s)",
        [*wall, *cpu],
        hlines=[benchkit.HLine(GOAL_S, f"goal: {GOAL_S} s")],
        xscale="log",
    )
    return benchkit.Figure([panel], panel_size=(6.5, 4.2))


REPORT = benchkit.Report(
    name="govctl",
    figure=figure,
    sections=lambda rows: {
        "govctl summary": f"{headline(rows)}\n\n{table(rows)}",
        "govctl runs": run_notes(rows),
    },
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--runs", type=int, default=15, help="timed runs per provider and size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    ap.add_argument("--md", type=Path, help="record whose sections are rewritten (<out>/govctl.md)")
    ap.add_argument("--render", action="store_true", help="redraw from <out>/govctl.json only")
    args = ap.parse_args(argv)
    md = args.md or args.out / "govctl.md"
    if args.render:
        rows = REPORT.publish([], args.out, md=md)
        print(table(rows, markdown=False))
        return
    bindir = Path(sys.executable).parent
    tools = {p: bindir / p for p in PROVIDERS}
    for exe in tools.values():
        if not exe.exists():
            raise SystemExit(f"{exe} not found: run inside the workspace venv (uv run ...)")
    command = "uv run --frozen --no-sync python tools/govctl/benchmarks/bench_check.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    env = {
        **benchkit.capture_env(package="govctl", command=command.rstrip()),
        "check_jsonschema": version("check-jsonschema"),
        "jsonschema": version("jsonschema"),
        "loadavg_start": os.getloadavg(),  # 1/5/15-minute run-queue length: other jobs' load
    }
    rows = measure(args, tools, env)
    for row in rows:
        row["loadavg_end"] = os.getloadavg()
    print(table(rows, markdown=False))
    REPORT.publish(rows, args.out, md=md)
    print(f"wrote {args.out}/govctl.json, govctl.png and the sections of {md}")


if __name__ == "__main__":
    main()
