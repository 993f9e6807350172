"""``cpkv-serve`` serving, checked: a live SGLang server with the plugin, on one or more GPUs.

For each served configuration it starts ``cpkv-serve`` on a checkpoint folder (a real one, or the
tiny GLM-5.1-shaped one ``glm_config.write_tiny_checkpoint`` writes, with random weights
sharpened by ``glm_config.TINY_SHARPEN`` so that answers depend on the prompt: at transformers'
scale, and more so with SGLang's ``--load-format dummy``, every output is alike, which
``cpkv-validate`` refuses as evidence; ``--dummy-weights`` uses dummy anyway),
then checks, in the live server:

- **hooks**: SGLang's scheduler processes (one per TP/CP rank, not the launcher) each recorded
  every always-on hook as applied, and no process recorded one it could not apply
  (``CPKV_HOOKS_RECORD_DIR``, written by the plugin in each process);
- **requests**: ``/generate`` and ``/v1/completions`` answer with text;
- **harness**: ``cpkv-validate --url`` (8 concurrent shared-prefix requests against the
  batch-size-1 reference, with the radix cache on) exits 0; its JSON report is kept;
- **controls**: ``plain`` and ``plain-<config>`` run plain SGLang (the plugin kept out) on the same
  arguments, and each configuration's outputs are set beside its control's (:func:`against_plain`);

plus three checks that must fail in the right way: the planted served-path fault
(``CPKV_DEBUG_FAULT=swap-kv-pages``) must make ``cpkv-validate`` exit 1; a planted hook failure
(``CPKV_DEBUG_BREAK_HOOK``) must stop start-up with one line naming it; ``--cpkv-shared-kv`` at
attention CP size 1 must be refused in one line before any weight is loaded.

Usage (on the GPU box, SGLang and the cpkv packages importable; ``scripts/gpu-suite serve``)::

    python3 serve_suite.py --out DIR [--model DIR] [--tp N] [--attn-cp-size N] [--only NAME ...]

Writes ``DIR/serve-suite.json`` (every check with its evidence), ``DIR/serve-suite.md``, and the
server logs under ``DIR/logs/``. A check's verdict is PASS, FAIL or INCONCLUSIVE (the server
answered and ``cpkv-validate`` found too little evidence to decide: :func:`verdict_of`). Exit 0
when every check passed, 1 otherwise (an inconclusive check is not a pass).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _serve_launch import (
    CPKV_SERVE,
    NO_PLUGINS,
    PLAIN,
    ServerDied,
    base_args,
    free_port,
    generate,
    launch,
    post,
    stop,
)
from bench_serve import BF16_DECODE, measure

EAGLE = [
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
]  # fmt: skip

#: name -> (extra cpkv-serve arguments, extra environment, what it shows)
CONFIGS: dict[str, tuple[list[str], dict[str, str], str]] = {
    "bf16": (BF16_DECODE, {}, "bf16 KV, radix cache on"),
    "fp8": (["--kv-cache-dtype", "fp8_e4m3"], {}, "fp8 KV, the plugin's FlashMLA pair"),
    "indexcache-f4": ([*BF16_DECODE, "--cpkv-index-topk-freq", "4"], {}, "IndexCache, frequency 4"),
    "eagle": ([*BF16_DECODE, *EAGLE], {}, "EAGLE over the model's NextN layer"),
    "chunked-256": ([*BF16_DECODE, "--chunked-prefill-size", "256"], {}, "prompts span forwards"),
    "user-backends": (
        ["--dsa-prefill-backend", "flashmla_sparse", "--dsa-decode-backend", "flashmla_sparse"],
        {},
        "a DSA backend the user set is kept",
    ),
}  # fmt: skip
#: configurations also timed (bench_serve.measure), under the names serve-bench.json gives them;
#: "plain" is SGLang without the plugin, the baseline, started after bf16 paid the kernel compiles
TIMED = {"bf16": "cpkv", "plain": "sglang", "indexcache-f4": "cpkv-f4"}
ORDER = ["bf16", "plain", "planted-fault", "indexcache-f4", "fp8", "plain-fp8", "eagle",
         "chunked-256", "user-backends", "refusals"]  # fmt: skip
#: ``plain-<config>``: plain SGLang (the plugin kept out) on ``<config>``'s arguments, the control
#: of each configuration that needs no ``--cpkv-*`` flag ("plain" is ``plain-bf16``); the suite
#: sets each configuration's outputs beside its control's (:func:`against_plain`)
CONTROLS = {
    f"plain-{name}": name
    for name, (extra, _, _) in CONFIGS.items()
    if name != "bf16" and not any(a.startswith("--cpkv") for a in extra)
} | {"plain": "bf16"}
FAULT_ENV = {"CPKV_DEBUG_FAULT": "swap-kv-pages", "CPKV_DEBUG_FAULT_ACK": "i-want-wrong-output"}
BREAK_ENV = {"CPKV_DEBUG_BREAK_HOOK": "config-repair"}


def always_on_hooks() -> list[str]:
    from sglang_cpkv.plugin.table import SPECS

    return [s.name for s in SPECS]


def hook_records(record_dir: Path) -> list[dict]:
    """The plugin's per-process records (``hooks-<pid>.json``; its temp files are dot-files)."""
    rows = [json.loads(p.read_text()) for p in sorted(record_dir.glob("hooks-*.json"))]
    return [r for r in rows if r.get("process") != "launcher"]


def say(name: str, what: str) -> None:
    """One progress line (the step's log is all a timed-out device call brings back)."""
    print(f"serve-suite: {name}: {what}", flush=True)


_LATE_COMPILE = re.compile(
    r"Triton kernel '([^']+)' took ([\d.]+) s to compile after serving started"
)


def late_compiles(log: Path) -> list[list]:
    """``[kernel, seconds]`` for each Triton kernel SGLang reports compiling after the server was
    ready (its ``triton_load_watch``, 0.5.20 on): what a cold box's first requests wait on."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [[k, float(s)] for k, s in _LATE_COMPILE.findall(text)]


def harness_args(prefix_words: int | None = None, seed: int | None = None) -> list[str]:
    """cpkv-validate's arguments beyond the suite's fixed ones: ``prefix_words``, the prompts'
    shared prefix (its default: 200 words, prompts of about 1,200 tokens for the byte-level tiny
    tokenizer, under ``index_topk``); ``seed``, which prompts (its default 0)."""
    more = [] if prefix_words is None else ["--prefix-words", str(prefix_words)]
    return more + ([] if seed is None else ["--seed", str(seed)])


def validate(url: str, report: Path, harness: Sequence[str] = ()) -> tuple[int, str]:
    """``cpkv-validate --url``: its exit status (0 pass, 1 contamination, 2 no evidence or an
    unusable server) and its last lines. 8 requests x 3 runs of 32 tokens, each under 600 s;
    ``harness``: more of its arguments (:func:`harness_args`)."""
    proc = subprocess.run(
        [sys.executable, "-m", "cpkv_validate", "--url", url, "--concurrency", "8",
         "--requests", "8", "--max-tokens", "32", "--timeout", "600", "--no-progress",
         *harness, "--json", str(report)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    return proc.returncode, "\n".join((proc.stdout + proc.stderr).splitlines()[-14:])


def check_config(
    name: str,
    argv: list[str],
    env: dict[str, str],
    out: Path,
    command: list[str] = CPKV_SERVE,
    timed: bool = True,
    ready_timeout: float = 480.0,
    row: dict | None = None,
    save: Callable[[], None] = lambda: None,
    harness: Sequence[str] = (),
) -> dict:
    """One served configuration: hooks in the live processes, requests, the harness (and the
    numbers, for the configurations in :data:`TIMED`, into ``serve-bench.json``).

    ``row`` (the caller's, so that what was seen survives a SIGTERM mid-way) gathers the evidence;
    its ``phase`` says what was under way; each phase is printed as it ends, then ``save`` runs."""
    record_dir = Path(tempfile.mkdtemp(prefix=f"hooks-{name}-"))
    env = {**env, "CPKV_HOOKS_RECORD_DIR": str(record_dir)}
    row = {"config": name} if row is None else row
    row.update(args=argv, env=sorted(env), harness=list(harness), phase="start-up")
    log_dir = out / "logs"
    t = time.perf_counter()

    def done(what: str) -> None:
        nonlocal t
        say(name, f"{what} ({time.perf_counter() - t:.0f} s)")
        save()
        t = time.perf_counter()

    try:
        with launch(
            name, command, argv, log_dir=log_dir, env=env, ready_timeout=ready_timeout
        ) as srv:
            row["ready_s"] = round(srv.ready_s, 1)
            done("ready")
            row["phase"] = "first /generate (a cold box compiles its kernels here)"
            gen = generate(srv, "The quick brown fox jumps over", 12)
            done("/generate answered")
            row["phase"] = "/v1/completions"
            comp = post(
                srv.url + "/v1/completions",
                {"model": "m", "prompt": "abc abc abc", "max_tokens": 8, "temperature": 0},
            )
            row["generate"] = gen.get("text", "")
            row["completions"] = comp["choices"][0]["text"]
            row["requests_ok"] = bool(row["generate"]) and bool(row["completions"])
            done("/v1/completions answered")
            row["phase"] = "cpkv-validate --url"
            report = out / f"validate-{name}.json"
            report.unlink(missing_ok=True)  # an earlier run's report is never this one's
            code, tail = validate(srv.url, report, harness)
            row["validate_exit"], row["validate_tail"] = code, tail
            row["validate_short"] = short_requests(report)
            done(f"cpkv-validate exit {code}")
            if timed and name in TIMED:
                import random

                row["phase"] = "timing (bench_serve.measure)"
                bench = out / "serve-bench.json"
                rows = json.loads(bench.read_text()) if bench.exists() else []
                rows += [{"server": TIMED[name], **r} for r in measure(srv, 2, random.Random(0))]
                bench.write_text(json.dumps(rows, indent=1) + "\n")
                done("timed")
            row["phase"] = "reading the hook records and stopping the server"
            records = hook_records(record_dir)
            log = srv.log_text()
    except ServerDied as exc:
        row.update(error=str(exc), ok=False)
        return row
    except Exception as exc:  # an HTTP error, a malformed answer: this configuration fails
        row.update(error=f"{type(exc).__name__}: {exc}", ok=False)
        return row
    finally:  # whatever ended it, a SIGTERM included: what the server compiled after ready
        row["late_compiles"] = late_compiles(log_dir / f"{name}.log")
    row["phase"] = "done"
    want = set(always_on_hooks())
    row["hook_records"] = [
        {k: r.get(k) for k in ("pid", "process", "sglang", "applied", "not_applied")}
        for r in records
    ]
    schedulers = [r for r in records if str(r.get("process", "")).startswith("sglang::scheduler")]
    row["hooks_ok"] = (
        command is CPKV_SERVE
        and bool(schedulers)
        and all(want <= set(r.get("applied") or []) for r in schedulers)
        and not any(r.get("not_applied") for r in records)
    )
    row["cpkv_lines"] = sorted(set(re.findall(r"cpkv\[[\w-]+\]:[^\n]*", log)))[:12]
    return row


#: refusal -> (extra arguments, environment, exit status, a phrase its last cpkv line holds)
REFUSALS = {
    "planted-hook-failure": ([*BF16_DECODE], BREAK_ENV, 1, "did not take"),
    "shared-kv-at-cp1": ([*BF16_DECODE, "--cpkv-shared-kv"], {}, 2, "--cpkv-shared-kv"),
}


def check_refusals(base: list[str], out: Path, rows: list[dict] | None = None) -> list[dict]:
    """The planted hook failure and the CP-1 refusal: each must stop start-up, before any weight
    loads, with its own exit status and one line saying why. ``base`` is built at CP size 1.
    Each row goes into ``rows`` (the caller's, kept if a SIGTERM stops the next) as it ends."""
    rows = [] if rows is None else rows
    for name, (extra, env, code, phrase) in REFUSALS.items():
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [*CPKV_SERVE, *base, *extra, "--host", "127.0.0.1", "--port", str(free_port())],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **env}, start_new_session=True,
        )  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            stop(proc)  # it started serving: the whole process group goes
            stdout, stderr = proc.communicate()
        except BaseException:  # SIGTERM: its own session misses the group signal, so stop it here
            stop(proc)
            raise
        (out / "logs" / f"{name}.log").write_text(stdout + stderr)
        lines = [ln for ln in stderr.splitlines() if "cpkv" in ln.lower()]
        line = lines[-1] if lines else stderr.strip()[-300:]
        loaded = "Load weight begin" in stdout + stderr
        rows.append(
            {
                "config": name,
                "exit": proc.returncode,
                "seconds": round(time.perf_counter() - t0, 1),
                "line": line,
                "weights_loaded": loaded,
                "ok": proc.returncode == code and phrase in line and not loaded,
            }
        )
    return rows


def short_requests(report: Path) -> int | None:
    """How many requests cpkv-validate's report judged SHORT (too few tokens compared); None
    where no report was written (a server that failed mid-run)."""
    try:
        return sum(o["verdict"] == "SHORT" for o in _outcomes(report).values())
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _outcomes(report: Path) -> dict[str, dict]:
    """request -> its verdict, first differing token and outputs, from a cpkv-validate report:
    the generated tokens (token ids on SGLang, where texts that decode alike may differ), else
    the text of older reports."""
    rows = json.loads(report.read_text())["scenarios"][0]["requests"]
    return {r["request"]: {"verdict": r["verdict"], "first_bad": r["first_bad"],
                           "outputs": r["detail"].get("generated") or r["detail"]["outputs"]}
            for r in rows}  # fmt: skip


def _fails(outcomes: dict[str, dict]) -> list[str]:
    return [f"{k}@{o['first_bad']}" for k, o in outcomes.items() if o["verdict"] == "FAIL"]


def against_plain(out: Path, rows: list[dict]) -> None:
    """Each configuration beside its control (``plain-<config>``) where both were validated in
    this run: how many requests' batch-size-1 reference and batch outputs are the same, and
    which requests FAILed in each (``request@token``). At CP 1 no hook replaces a kernel a request
    runs, so a FAIL the control shows too, on the same outputs, is SGLang's behaviour at batch
    size 8 and not the plugin's; a FAIL the control lacks is the plugin's to explain."""
    seen = {r["config"]: r for r in rows if "validate_exit" in r}
    for control, name in CONTROLS.items():
        ours, theirs = out / f"validate-{name}.json", out / f"validate-{control}.json"
        if name not in seen or control not in seen or not (ours.exists() and theirs.exists()):
            continue
        try:
            a, b = _outcomes(ours), _outcomes(theirs)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:  # a cut report
            seen[name]["against_plain"] = {
                "control": control,
                "error": f"{type(exc).__name__}: {exc}",
            }
            continue
        same = {
            run: sum(k in b and a[k]["outputs"][run] == b[k]["outputs"][run] for k in a)
            for run in ("reference", "batch")
        }
        seen[name]["against_plain"] = {
            "control": control, "requests": len(a), "same_reference": same["reference"],
            "same_batch": same["batch"], "fail": _fails(a), "control_fail": _fails(b),
        }  # fmt: skip


def plain_note(row: dict) -> str:
    """The table's words for :func:`against_plain`'s finding (empty where none was made)."""
    c = row.get("against_plain")
    if not c:
        return ""
    if "error" in c:
        return f"vs {c['control']}: not compared ({c['error'][:120]})"
    n = c["requests"]
    return (
        f"vs {c['control']}: same reference {c['same_reference']}/{n}, same batch "
        f"{c['same_batch']}/{n}; FAIL {', '.join(c['fail']) or 'none'} "
        f"({c['control']}: {', '.join(c['control_fail']) or 'none'})"
    )


def first_line(text: str | None) -> str:
    return text.splitlines()[0][:160] if text else ""


def compiled(row: dict) -> str:
    """The late Triton compiles of a row, summed (empty when SGLang reported none)."""
    late = row.get("late_compiles") or []
    total = sum(s for _, s in late)
    return f"{len(late)} Triton kernel(s) compiled after ready, {total:.0f} s" if late else ""


def verdict_of(row: dict) -> str:
    """PASS; INCONCLUSIVE where the server answered, its hooks applied (a control has none), and
    cpkv-validate refused with "not enough evidence" (exit 2 with SHORT requests in its report: a
    near-tie drift early in a request leaves too few tokens compared), which is no finding either
    way; else FAIL. Any other exit 2
    (a server that stopped answering, no batch formed) is a FAIL, and so is every outcome of the
    planted fault but exit 1 (it must be found)."""
    if row.get("ok"):
        return "PASS"
    inconclusive = (
        row.get("validate_exit") == 2
        and row.get("requests_ok")
        and not row.get("error")
        and row.get("config") != "planted-fault"
        and (row.get("hooks_ok") or row.get("config") in CONTROLS)
        and (row.get("validate_short") or 0) > 0  # its exit 2 is then "not enough evidence"
    )
    return "INCONCLUSIVE" if inconclusive else "FAIL"


def validate_line(row: dict) -> str:
    """cpkv-validate's own one line where it ended with exit 2 (why there was no verdict)."""
    if row.get("validate_exit") != 2:
        return ""
    lines = [x for x in (row.get("validate_tail") or "").splitlines() if "error:" in x]
    return lines[-1].split("error:", 1)[1].split(";")[0].split(" (")[0].strip() if lines else ""


def suite_table(rows: list[dict]) -> str:
    """The suite as a markdown table: one row per check, with the evidence a reader asks for."""
    lines = [
        "| check | verdict | ready | hooks in schedulers | requests | cpkv-validate | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "exit" in r:  # a refusal
            note = f"exit {r['exit']} in {r['seconds']} s: {r['line'][:160]}"
            cells = ["—", "—", "—", "—", note]
        else:
            procs = [h["process"] for h in r.get("hook_records", [])]
            cells = [
                f"{r['ready_s']} s" if "ready_s" in r else "—",
                ("all" if r.get("hooks_ok") else "no") + f" ({len(procs)} process(es))",
                "ok" if r.get("requests_ok") else "no",
                str(r.get("validate_exit", "—")),
                "; ".join(
                    filter(
                        None,
                        [first_line(r.get("error")), validate_line(r), compiled(r), plain_note(r)],
                    )
                ),
            ]
        lines.append(f"| {r['config']} | {verdict_of(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_check(
    name: str,
    row: dict,
    args: argparse.Namespace,
    base: list[str],
    dummy: bool,
    save: Callable[[], None] = lambda: None,
    finished: list[dict] | None = None,
) -> list[dict]:
    """The rows one entry of ``--only`` gives (the refusals give two, into ``finished`` as each
    ends), with their verdicts; ``save`` writes what is known so far (see :func:`check_config`)."""
    if name == "refusals":
        return check_refusals(base_args(args.model, args.tp, 1, dummy), args.out, finished)
    harness = harness_args(args.prefix_words, args.seed)
    if name in CONTROLS:
        extra, env, _ = CONFIGS[CONTROLS[name]]
        check_config(
            name, [*base, *extra], {**env, **NO_PLUGINS}, args.out, command=PLAIN,
            timed=not args.no_timing, ready_timeout=args.ready_timeout, row=row, save=save,
            harness=harness,
        )  # fmt: skip
        row["ok"] = row.get("requests_ok") and row.get("validate_exit") == 0
        return [row]
    if name == "planted-fault":
        check_config(
            name, [*base, *BF16_DECODE], FAULT_ENV, args.out, ready_timeout=args.ready_timeout,
            row=row, save=save, harness=harness,
        )  # fmt: skip
        row["ok"] = row.get("validate_exit") == 1  # contamination must be found
        return [row]
    extra, env, _ = CONFIGS[name]
    check_config(
        name, [*base, *extra], env, args.out, timed=not args.no_timing,
        ready_timeout=args.ready_timeout, row=row, save=save, harness=harness,
    )  # fmt: skip
    passed = row.get("requests_ok") and row.get("hooks_ok") and row.get("validate_exit") == 0
    row.setdefault("ok", passed)
    return [row]


def write_results(out: Path, *groups: list[dict]) -> None:
    """``serve-suite.json`` and ``serve-suite.md`` from ``groups`` of rows, in order (the finished
    rows, then the configuration under way: its rows so far and its own), at every phase's end."""
    rows = [r for group in groups for r in group]
    (out / "serve-suite.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "serve-suite.md").write_text(suite_table(rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", type=Path, help="checkpoint folder (default: the tiny GLM-5.1 one)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--attn-cp-size", type=int, default=1)
    known = ORDER + sorted(set(CONTROLS) - set(ORDER))
    p.add_argument(
        "--only",
        nargs="*",
        help=f"configurations to run, in order, of {known} (default {ORDER})",
    )
    p.add_argument("--no-timing", action="store_true", help="skip bench_serve.measure")
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=480.0,
        help="seconds a server may take to answer /v1/models (a fresh box compiles for minutes)",
    )
    p.add_argument(
        "--prefix-words",
        type=int,
        help="cpkv-validate's shared prefix in words (its default 200 gives prompts of about "
        "1,200 bytes, 1,200 tokens for the tiny byte-level tokenizer, under index_topk 2048, "
        "where every key is selected); 450 words pass it",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="cpkv-validate's --seed: which prompts (its default 0); a seed whose prompts meet a "
        "near-tie early leaves too few tokens of evidence (scripts/serve/tiny_rounding.py "
        "--seed N --runs bf16+fp8kv previews the gaps on CPU)",
    )
    p.add_argument(
        "--dummy-weights", action="store_true", help="the tiny model on SGLang's dummy weights"
    )
    args = p.parse_args(argv)
    unknown = set(args.only or []) - set(ORDER) - set(CONTROLS)
    if unknown:
        p.error(f"unknown --only {sorted(unknown)}; choose from {known}")

    # gpu-suite's timeout sends SIGTERM (to the process, then to its group): leave once, through
    # finally, which stops the servers
    def stopped(*_) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stopped)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    dummy = args.model is None and args.dummy_weights
    if args.model is None:
        from glm_config import write_tiny_checkpoint

        folder = Path(tempfile.mkdtemp(prefix="tiny-glm51-"))
        args.model = write_tiny_checkpoint(folder, weights=not dummy)
    base = base_args(args.model, args.tp, args.attn_cp_size, dummy)
    names = args.only or ORDER
    rows: list[dict] = []
    for name in names:
        t0 = time.perf_counter()
        row: dict = {"config": name}
        finished: list[dict] = []
        say(name, "starting")
        try:
            save = functools.partial(write_results, args.out, rows, finished, [row])
            new = run_check(name, row, args, base, dummy, save, finished)
        except SystemExit:
            # the step's time limit (SIGTERM): keep what this configuration showed, say where
            row.update(
                ok=False,
                error=f"stopped by SIGTERM during {row.get('phase', 'start-up')}"
                f" after {time.perf_counter() - t0:.0f} s",
            )
            if "late_compiles" not in row:  # a check that starts no server of its own name
                row["late_compiles"] = late_compiles(args.out / "logs" / f"{name}.log")
            against_plain(args.out, [*rows, *finished, row])
            write_results(args.out, rows, finished, [row])
            say(name, f"FAIL {row['error']}")
            raise
        rows += new
        for r in new:
            took = time.perf_counter() - t0
            say(r["config"], f"{verdict_of(r)} ({took:.0f} s) {r.get('error', '')[:300]}")
        against_plain(args.out, rows)  # after each configuration: a later SIGTERM keeps it
        write_results(args.out, rows)
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
