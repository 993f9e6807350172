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


@contextlib.contextmanager
def stub_server(complete) -> Iterator[str]:
    """An OpenAI-compatible stub in a thread: ``/v1/models`` lists ``stub``, ``/flush_cache``
    answers 200, and ``/v1/completions`` returns ``complete(prompt, nth)`` as ``choices[0]``
    plus ``usage`` (``nth`` counts earlier requests with the same prompt: 0 alone, 1 batch).
    ``complete`` returns ``(text, completion_tokens, finish_reason)``; None leaves a field out.
    """
    import http.server
    import json
    import threading

    seen: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send({"data": [{"id": "stub"}]})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.endswith("/completions"):
                return self._send({"status": "ok"})
            prompt = json.loads(body)["prompt"]
            with lock:
                nth = seen.get(prompt, 0)
                seen[prompt] = nth + 1
            text, count, finish = complete(prompt, nth)
            choice: dict = {"index": 0, "text": text}
            if finish is not None:
                choice["finish_reason"] = finish
            out: dict = {"choices": [choice]}
            if count is not None:
                out["usage"] = {"completion_tokens": count}
            return self._send(out)

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def raw_server(reply: bytes) -> Iterator[str]:
    """A TCP server in a thread that answers every connection with ``reply`` and closes it
    (bytes that need not be HTTP, or an HTTP head promising more body than it sends)."""
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread
        sock.close()
