"""Servers for the ``http`` engine tests.

Processes (:func:`server`, :func:`refserver`): start on a free loopback port, wait for
``/health`` with a deadline, always kill the whole process group, log to a file (a pipe that
nobody reads fills up and stalls a chatty server). Raw sockets in a thread (:func:`raw_server`,
:func:`trickle_server`, :func:`endless_server`): replies no HTTP library would send. The fake
OpenAI servers are in ``_fakes``.
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


_JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@contextlib.contextmanager
def _socket_server(answer) -> Iterator[str]:
    """Each connection in its own thread: its request read, then ``answer(conn)``."""
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            answer(conn, stop)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def trickle_server(every_s: float = 0.05):
    """Answers a head promising 10**6 bytes, then one byte every ``every_s`` seconds until the
    client goes (or 120 s): each read returns long before any per-read timeout."""

    def answer(conn: socket.socket, stop) -> None:
        conn.sendall(_JSON_HEAD + b"Content-Length: 1000000\r\n\r\n")
        for _ in range(int(120 / every_s)):
            if stop.wait(every_s):
                return
            conn.sendall(b" ")

    return _socket_server(answer)


@contextlib.contextmanager
def endless_server(total: int) -> Iterator[tuple[str, list[int]]]:
    """Answers a valid JSON ``/v1/models`` body of ``total`` bytes without a Content-Length
    (read to the close), padded in 64 KiB writes; yields the URL and a list whose one number
    grows by the bytes sent (the client that stops reading stops it)."""
    sent = [0]
    head = b'{"data": [{"id": "m"}], "pad": "'

    def answer(conn: socket.socket, stop) -> None:
        conn.sendall(_JSON_HEAD + b"Connection: close\r\n\r\n" + head)
        pad, left = b"x" * 65536, total - len(head) - 2
        while left > 0 and not stop.is_set():
            chunk = pad[: min(left, len(pad))]
            conn.sendall(chunk)
            sent[0] += len(chunk)
            left -= len(chunk)
        conn.sendall(b'"}')

    with _socket_server(answer) as url:
        yield url, sent
