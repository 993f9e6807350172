"""Start a real SGLang server (plain, or ``cpkv-serve``), wait until it answers, and stop it whole.

Used by ``serve_suite.py`` (the checks) and ``bench_serve.py`` (the numbers) on a GPU box. A server
runs in its own process session with its output in a log file (a pipe nobody reads would fill and
stall it); readiness is ``GET /v1/models`` answering 200, which SGLang serves once its scheduler is
up, without running a forward (its ``/health`` runs one, and the first forward compiles kernels).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PLAIN = [sys.executable, "-m", "sglang.launch_server"]
CPKV_SERVE = [sys.executable, "-m", "sglang_cpkv.serve.cli"]
#: SGLang loads every installed plugin; a whitelist naming none keeps cpkv out of plain runs.
NO_PLUGINS = {"SGLANG_PLUGINS": "none"}


def base_args(model: Path, tp: int = 1, cp: int = 1, dummy: bool = False) -> list[str]:
    """The server arguments every served run shares (the suite's checks and the timed servers
    alike): page 64, no CUDA graphs or warmup request, no grammar backend."""
    args = ["--model-path", str(model), "--tp-size", str(tp), "--page-size", "64"]
    args += ["--mem-fraction-static", "0.6", "--context-length", "40000"]
    args += ["--disable-cuda-graph", "--skip-server-warmup", "--grammar-backend", "none"]
    if cp > 1:
        # SGLang (0.5.20 on) refuses --enable-prefill-cp without a strategy; interleave is the
        # one the shared-KV pool and the deploy recipes use
        args += ["--enable-prefill-cp", "--attn-cp-size", str(cp), "--cp-strategy", "interleave"]
    return args + (["--load-format", "dummy"] if dummy else [])


class ServerDied(RuntimeError):
    """The server exited (or never answered) before it was ready."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A started server: its URL, log, and seconds from launch to ready."""

    name: str
    url: str
    log: Path
    ready_s: float
    proc: subprocess.Popen = field(repr=False)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def launch(
    name: str,
    command: list[str],
    args: list[str],
    *,
    log_dir: Path,
    env: dict[str, str] | None = None,
    ready_timeout: float = 240.0,
) -> Iterator[Server]:
    """Run ``command + args --port P`` until the block ends; yield it once ``/v1/models`` answers.

    Raises:
        ServerDied: it exited first (the log's last lines in the message) or missed the deadline.
    """
    port = free_port()
    log = log_dir / f"{name}.log"
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, *args, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise ServerDied(f"{name} exited with {proc.returncode} before ready:\n{tail}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url + "/v1/models", timeout=2) as r,
            ):
                if r.status == 200:
                    break
            if time.perf_counter() - t0 > ready_timeout:
                raise ServerDied(f"{name} not ready after {ready_timeout:.0f} s (log {log})")
            time.sleep(0.25)
        yield Server(name, url, log, time.perf_counter() - t0, proc)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's whole process group, SIGKILL after 20 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    """POST JSON, return the JSON answer (raises on HTTP errors)."""
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def flush_cache(server: Server) -> None:
    """Empty the radix cache, so the next prompt is computed whole."""
    urllib.request.urlopen(
        urllib.request.Request(server.url + "/flush_cache", b"", method="POST"), timeout=60
    ).read()


def generate(server: Server, text: str, max_new_tokens: int, timeout: float = 600.0) -> dict:
    """Greedy ``/generate`` of ``text``; SGLang's answer (``text``, ``meta_info``)."""
    return post(
        server.url + "/generate",
        {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}},
        timeout,
    )
