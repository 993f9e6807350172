"""The reference engine behind ``python -m cpkv_validate.refserver`` (see there): a
continuous-batching loop over :class:`Engine` and its HTTP handler. Imports torch; the command
imports this module only once its arguments are checked and its port is bound."""

from __future__ import annotations

import itertools
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from ._config import PRESETS
from ._engine import Engine
from ._model import init_weights
from ._scenarios import MARKER_BASE

__all__ = ["RefServer", "serve"]

MODEL_NAME = "cpkv-reference"


def encode(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % MARKER_BASE for w in text.split()]


@dataclass
class _Job:
    name: str
    ids: list[int]
    max_tokens: int
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class RefServer:
    """Continuous batching over one :class:`Engine` (cp 1) on a background thread.

    Args:
        inverse: ``per-request`` or ``legacy``.
        allocator: ``free`` or ``sglang`` (the engine's page allocator model).
        num_pages: KV pool pages; cached prefixes of finished requests are evicted (oldest
            first) when a step needs room.
        window_s: how long an idle loop waits for concurrent arrivals before a step (decode
            steps do not wait: requests arriving meanwhile join the next step).
    """

    def __init__(
        self,
        inverse: str = "per-request",
        seed: int = 0,
        num_pages: int = 2048,
        window_s: float = 0.05,
        allocator: str = "free",
    ) -> None:
        self.cfg = PRESETS["tiny"]
        self.w = init_weights(self.cfg, seed)
        self.engine = Engine(
            self.cfg, self.w, num_pages=num_pages, inverse=inverse, allocator=allocator
        )
        self.window_s = window_s
        self.pending: list[_Job] = []
        self.running: list[_Job] = []
        self.lock, self.wake = threading.Lock(), threading.Event()
        self.step_lock = threading.Lock()  # the engine is touched by one thread at a time
        self.ids = itertools.count()
        self.max_batch = 0
        self.stop = False
        self.thread = threading.Thread(target=self._loop, name="refserver-loop", daemon=True)
        self.thread.start()

    def generate(self, prompt: str, max_tokens: int) -> _Job:
        ids = encode(prompt) or [0]
        job = _Job(f"req-{next(self.ids)}", ids, max_tokens)
        with self.lock:
            self.pending.append(job)
        self.wake.set()
        job.done.wait()
        return job

    def flush(self) -> None:
        """Evict every cached prefix no running request holds (SGLang's ``/flush_cache``)."""
        with self.step_lock:
            for name in self.engine.pages.cached_names():
                if name not in self.engine.requests:
                    self.engine.evict(name)

    def _make_room(self, batch: list[tuple[str, int]]) -> None:
        eng, p = self.engine, self.cfg.page_size
        need = 2 * len(batch)  # copy-on-write pages
        for name, e in batch:
            r = eng.requests[name]
            need += max(0, -(-(r.cached + e) // p) - len(r.pages))
        for name in eng.pages.cached_names():
            if eng.pages.num_free() >= need:
                break
            if name not in eng.requests:
                eng.evict(name)

    def _loop(self) -> None:
        while not self.stop:
            if not self.wake.wait(0.1):
                continue
            if not self.running:  # idle: let concurrent arrivals gather into one prefill batch
                time.sleep(self.window_s)
            with self.lock:
                new, self.pending = self.pending, []
                self.wake.clear()
            with self.step_lock:
                self._step(new)

    def _step(self, new: list[_Job]) -> None:
        batch = []
        for job in self.running:
            self.engine.requests[job.name].tokens.append(job.out[-1])
            batch.append((job.name, 1))
        for job in new:
            req = self.engine.admit(job.name, job.ids)
            batch.append((job.name, len(job.ids) - req.cached))
            self.running.append(job)
        if not batch:
            return
        self.max_batch = max(self.max_batch, len(batch))
        try:
            self._make_room(batch)
            out = self.engine.step(batch)
        except Exception as exc:  # fail the batch, keep serving
            for job in self.running:
                job.error = f"{type(exc).__name__}: {exc}"
                job.done.set()
                self.engine.finish(job.name)
            self.running = []
            return
        still = []
        for job in self.running:
            logits = out.hidden[job.name][-1] @ self.w["lm_head.weight"].T
            nxt = int(torch.argmax(logits))
            job.out.append(nxt)
            job.logprobs.append(float(torch.log_softmax(logits, -1)[nxt]))
            if len(job.out) >= job.max_tokens:
                self.engine.finish(job.name)
                job.done.set()
            else:
                still.append(job)
        self.running = still
        if self.running:
            self.wake.set()


def _handler(server: RefServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            return None

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") == "/flush_cache":
                server.flush()
                return self._send(200, {"status": "flushed"})
            if self.path.rstrip("/") != "/v1/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = req["prompt"]
                prompt = prompt[0] if isinstance(prompt, list) else prompt
                max_tokens = int(req.get("max_tokens", 16))
                if float(req.get("temperature", 1.0)) != 0.0 or max_tokens < 1:
                    raise ValueError("only greedy decoding (temperature 0, max_tokens >= 1)")
            except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
                return self._send(400, {"error": {"message": f"bad request: {exc}"}})
            job = server.generate(str(prompt), max_tokens)
            if job.error:
                return self._send(500, {"error": {"message": job.error}})
            words = [f"t{i}" for i in job.out]
            choice = {"index": 0, "text": " " + " ".join(words), "finish_reason": "length"}
            if req.get("logprobs") is not None:
                choice["logprobs"] = {"tokens": words, "token_logprobs": job.logprobs}
            usage = {"prompt_tokens": len(job.ids), "completion_tokens": len(job.out)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            self._send(
                200,
                {
                    "id": job.name,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": MODEL_NAME,
                    "choices": [choice],
                    "usage": usage,
                },
            )

    return Handler


def serve(
    port: int = 0,
    inverse: str = "per-request",
    seed: int = 0,
    allocator: str = "free",
    *,
    httpd: ThreadingHTTPServer | None = None,
) -> tuple[ThreadingHTTPServer, RefServer]:
    """Start serving on 127.0.0.1:``port`` (0 = any free port) in a background thread.

    ``httpd``: a server already bound (its handler is replaced), so the port is held from the
    moment it was checked.
    """
    torch.set_num_threads(1)
    ref = RefServer(inverse=inverse, seed=seed, allocator=allocator)
    if httpd is None:
        from .refserver import QuietHTTPServer

        httpd = QuietHTTPServer(("127.0.0.1", port), _handler(ref))
    else:
        httpd.RequestHandlerClass = _handler(ref)
    threading.Thread(target=httpd.serve_forever, name="refserver-http", daemon=True).start()
    return httpd, ref
