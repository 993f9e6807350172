"""Server processes for the ``http`` engine tests: start on a free loopback port, wait for
``/health`` with a deadline, always kill the whole process group, log to a file (a pipe that
nobody reads fills up and stalls a chatty server).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(
    cmd: list[str], port: int, log: Path, timeout: float = 120.0, env: dict | None = None
) -> Iterator[str]:
    """Run ``cmd`` (listening on ``port``) until the block ends; yields its base URL."""
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{url} did not come up in {timeout}s: {log.read_text()[-4000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def refserver(inverse: str, log: Path, allocator: str = "free"):
    """The reference engine behind ``/v1/completions`` in its own process."""
    port = free_port()
    cmd = [sys.executable, "-m", "cpkv_validate.refserver", "--port", str(port)]
    cmd += ["--inverse", inverse, "--allocator", allocator]
    return server(cmd, port, log)
