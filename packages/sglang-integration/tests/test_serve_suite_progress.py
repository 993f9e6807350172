"""The GPU serve suite keeps its evidence when the device call's time runs out, and reads SGLang's
own report of kernels compiled after ready.

No server starts here (it needs a GPU): ``run_check`` stands in for one configuration's run and is
stopped by a real SIGTERM through the suite's own handler, the way ``gpu-suite``'s ``timeout``
stops it. The late-compile lines are written by SGLang 0.5.23's ``triton_load_watch`` itself.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import _sglang_env as env
import pytest

pytestmark = env.SGLANG_IMPORT_WARNINGS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import serve_suite  # noqa: E402


def sglang_late_compile_line(kernel: str, seconds: float, caplog) -> str:
    """The warning SGLang logs for an uncached compile after serving started."""
    from sglang.srt.utils import triton_load_watch as watch

    caplog.clear()
    old = watch._serving_started
    watch._serving_started = True
    try:
        with caplog.at_level(logging.WARNING, logger=watch.logger.name):
            watch._on_compilation(
                src=SimpleNamespace(name=kernel),
                metadata=None,
                metadata_group=None,
                times=SimpleNamespace(total=int(seconds * 1e6)),
                cache_hit=False,
            )
    finally:
        watch._serving_started = old
    (record,) = caplog.records
    return f"[2026-12-07 08:21:20] {record.getMessage()}"


def test_late_compiles_reads_sglangs_own_lines(tmp_path, caplog):
    log = tmp_path / "bf16.log"
    lines = [
        "[2026-12-07 08:20:34] The server is fired up and ready to roll!",
        sglang_late_compile_line("alloc_extend_kernel", 46.06, caplog),
        sglang_late_compile_line("write_req_to_token_pool_triton", 17.14, caplog),
    ]
    log.write_text("\n".join(lines) + "\n")
    assert serve_suite.late_compiles(log) == [
        ["alloc_extend_kernel", 46.06],
        ["write_req_to_token_pool_triton", 17.14],
    ]
    assert serve_suite.late_compiles(tmp_path / "absent.log") == []


def test_a_cache_hit_is_not_a_late_compile(tmp_path, caplog):
    """Mutation guard: SGLang says nothing for a hit, so a carried cache shows no late compiles."""
    from sglang.srt.utils import triton_load_watch as watch

    watch._serving_started, old = True, watch._serving_started
    try:
        with caplog.at_level(logging.WARNING, logger=watch.logger.name):
            watch._on_compilation(
                src=SimpleNamespace(name="k"),
                metadata=None,
                metadata_group=None,
                times=SimpleNamespace(total=int(40e6)),
                cache_hit=True,
            )
    finally:
        watch._serving_started = old
    assert not caplog.records


def test_sigterm_mid_configuration_keeps_the_row_and_says_where(
    tmp_path, monkeypatch, capsys, caplog
):
    out = tmp_path / "serve"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "fp8.log").write_text(
        sglang_late_compile_line("alloc_extend_kernel", 42.29, caplog) + "\n"
    )
    previous = signal.getsignal(signal.SIGTERM)

    def first_passes_second_is_stopped(name, row, args, base, dummy, save, finished):
        if name == "bf16":
            row.update(ready_s=170.2, ok=True, requests_ok=True, validate_exit=0, hooks_ok=True)
            return [row]
        row.update(ready_s=111.0, phase="first /generate (a cold box compiles its kernels here)")
        save()  # a phase ended: what is known is on disk before anything else can happen
        on_disk = json.loads((out / "serve-suite.json").read_text())
        assert [r["config"] for r in on_disk] == ["bf16", "fp8"] and on_disk[1]["ready_s"] == 111.0
        os.kill(os.getpid(), signal.SIGTERM)  # what gpu-suite's timeout sends
        raise AssertionError("the suite's SIGTERM handler did not stop the run")

    monkeypatch.setattr(serve_suite, "run_check", first_passes_second_is_stopped)
    try:
        with pytest.raises(SystemExit) as stopped:
            serve_suite.main(["--out", str(out), "--model", str(tmp_path), "--only", "bf16", "fp8"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 143
    rows = json.loads((out / "serve-suite.json").read_text())
    assert [r["config"] for r in rows] == ["bf16", "fp8"]
    assert rows[0]["ok"] is True
    fp8 = rows[1]
    assert fp8["ok"] is False and fp8["ready_s"] == 111.0
    assert fp8["error"].startswith("stopped by SIGTERM during first /generate")
    assert fp8["late_compiles"] == [["alloc_extend_kernel", 42.29]]
    md = (out / "serve-suite.md").read_text()
    assert (
        "| fp8 | FAIL | 111.0 s |" in md and "1 Triton kernel(s) compiled after ready, 42 s" in md
    )
    progress = capsys.readouterr().out.splitlines()
    assert progress[0] == "serve-suite: bf16: starting"
    assert progress[-1].startswith("serve-suite: fp8: FAIL stopped by SIGTERM")


def test_the_table_sums_late_compiles():
    row = {
        "config": "bf16",
        "ok": False,
        "ready_s": 167.0,
        "error": "RemoteDisconnected: Remote end closed connection\nmore",
        "late_compiles": [["alloc_extend_kernel", 46.06], ["compute_position_kernel", 16.19]],
    }
    line = serve_suite.suite_table([row]).splitlines()[-1]
    assert line.endswith(
        "RemoteDisconnected: Remote end closed connection; "
        "2 Triton kernel(s) compiled after ready, 62 s |"
    )


def test_a_finished_refusal_survives_a_sigterm_during_the_next(tmp_path, monkeypatch):
    out = tmp_path / "serve"
    previous = signal.getsignal(signal.SIGTERM)

    def one_refusal_then_stopped(name, row, args, base, dummy, save, finished):
        finished.append(
            {"config": "planted-hook-failure", "exit": 1, "seconds": 41.0, "ok": True,
             "line": "cpkv-serve: hook config-repair did not take", "weights_loaded": False}
        )  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the suite's SIGTERM handler did not stop the run")

    monkeypatch.setattr(serve_suite, "run_check", one_refusal_then_stopped)
    try:
        with pytest.raises(SystemExit):
            serve_suite.main(["--out", str(out), "--model", str(tmp_path), "--only", "refusals"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    rows = json.loads((out / "serve-suite.json").read_text())
    assert [(r["config"], r["ok"]) for r in rows] == [
        ("planted-hook-failure", True),
        ("refusals", False),
    ]
