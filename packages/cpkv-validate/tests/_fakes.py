"""Small fake OpenAI-compatible servers (threads), one per behaviour the http engine must judge.

:class:`Fake` serves ``/v1/models``, ``/v1/completions``, ``/flush_cache`` (unless
``flush=False``: 404, no flush), ``/get_server_info`` (when ``info`` is given) and, with
``native=True``, SGLang's ``/generate`` in its shape (``meta_info.output_token_logprobs`` as
``[logprob, id, text]``, ``output_top_logprobs``): a stand-in for SGLang's HTTP server, which
cannot run on a CPU machine; the shape is read off SGLang's ``TokenizerManager``. Its completion
is :meth:`Fake.tokens` of the prompt, an honest function of the prompt alone, with top-2
logprobs whose margin is wide; a subclass changes one thing. ``nth`` counts earlier requests
with the same prompt: 0 is the reference, 1 the batch, 2 the reference after the batch.

The batch's first request is held until a second one has arrived (or 10 s): the batch then
overlaps by construction, on any machine, and the engine's in-flight count sees 2 or more.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
import zlib
from collections.abc import Iterator

WIDE = 3.0  # top-two logprob gap of an honest answer: no near-tie
WARM = "Warmup request"


def honest(prompt: str, n: int) -> list[str]:
    """``n`` tokens that depend on ``prompt`` only (`` t<crc>``)."""
    return [f" t{zlib.crc32(f'{prompt}|{k}'.encode()) % 1000}" for k in range(n)]


class Fake:
    """The honest server; override :meth:`tokens` (or :meth:`choice`) for a behaviour."""

    def __init__(
        self,
        *,
        flush: bool = True,
        info: dict | None = None,
        logprobs: bool = True,
        native: bool = False,
    ):
        self.flush, self.info, self.logprobs, self.native = flush, info, logprobs, native
        self.native_calls = 0
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}
        self.in_flight: dict[int, str] = {}
        self.events: list[str] = []  # "flush", "warm", "complete <nth>" in arrival order
        self.batch_arrivals = 0
        self.gate = threading.Event()

    # the behaviour ------------------------------------------------------------------------
    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        """The generated tokens; ``others``: prompts of the other requests in flight."""
        return honest(prompt, n)

    def margins(self, prompt: str, toks: list[str], nth: int) -> list[float]:
        return [WIDE] * len(toks)

    def choice(self, prompt: str, n: int, nth: int, others: list[str], lp: bool) -> dict:
        toks = self.tokens(prompt, n, nth, others)
        text = "".join(self.token_text(t) for t in toks)
        out: dict = {"index": 0, "text": text, "finish_reason": "length"}
        if lp and self.logprobs:
            tops = [
                {t: -0.05, f"{t}#": -0.05 - m}
                for t, m in zip(toks, self.margins(prompt, toks, nth), strict=True)
            ]
            out["logprobs"] = {
                "tokens": [self.token_text(t) for t in toks],
                "top_logprobs": [{self.token_text(k): v for k, v in t.items()} for t in tops],
            }
        return {"choices": [out], "usage": {"completion_tokens": len(toks)}}

    def token_id(self, tok: str) -> int:
        """The id ``/generate`` answers for a token (the completions API shows ``tok``)."""
        return zlib.crc32(tok.encode()) % 50000

    def token_text(self, tok: str) -> str:
        """The decoded text of one token, as both APIs show it."""
        return tok

    # serving ------------------------------------------------------------------------------
    def complete(self, body: dict) -> dict:
        prompt, n = str(body["prompt"]), int(body.get("max_tokens", 16))
        lp = body.get("logprobs") is not None
        return self.answer(prompt, lambda nth, others: self.choice(prompt, n, nth, others, lp))

    def answer(self, prompt: str, reply):
        """``reply(nth, others)`` with the request counted, in flight, and the batch held until
        a second request has arrived."""
        warm = WARM in prompt
        with self.lock:
            nth = self.seen.get(prompt, 0)
            self.seen[prompt] = nth + 1
            self.events.append("warm" if warm else f"complete {nth}")
            me = id(threading.current_thread())
            self.in_flight[me] = prompt
            if nth == 1 and not warm:
                self.batch_arrivals += 1
                if self.batch_arrivals >= 2:
                    self.gate.set()
        try:
            if nth == 1 and not warm:
                self.gate.wait(10)
            with self.lock:
                others = [p for t, p in self.in_flight.items() if t != me and WARM not in p]
            return reply(nth, sorted(others))
        finally:
            with self.lock:
                del self.in_flight[me]

    def generate(self, body: dict) -> dict:
        """SGLang's ``/generate``: :meth:`tokens` by id, the runner-up of each a distinct id."""
        prompt = str(body["text"])
        n = int((body.get("sampling_params") or {}).get("max_new_tokens", 16))
        return self.answer(prompt, lambda nth, others: self.native_reply(prompt, n, nth, others))

    def native_reply(self, prompt: str, n: int, nth: int, others: list[str]) -> dict:
        toks = self.tokens(prompt, n, nth, others)
        ids = [self.token_id(t) for t in toks]
        text = "".join(self.token_text(t) for t in toks)
        meta = {
            "output_token_logprobs": [
                [-0.05, i, self.token_text(t)] for i, t in zip(ids, toks, strict=True)
            ],
            "output_top_logprobs": [
                [
                    [-0.05, self.token_id(t), self.token_text(t)],
                    [-0.05 - m, self.token_id(f"{t}#"), self.token_text(f"{t}#")],
                ]
                for t, m in zip(toks, self.margins(prompt, toks, nth), strict=True)
            ],
            "completion_tokens": len(toks),
            "finish_reason": {"type": "length", "length": n},
        }
        return {"text": text, "output_ids": ids, "meta_info": meta}

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/v1/completions":
            return 200, self.complete(body)
        if path == "/generate" and self.native:
            with self.lock:
                self.native_calls += 1
            return 200, self.generate(body)
        if path == "/flush_cache" and self.flush:
            with self.lock:
                self.events.append("flush")
                self.flushed()
            return 200, {"message": "Cache flushed."}
        return 404, {"detail": "Not Found"}

    def flushed(self) -> None:
        """What a flush drops (called under the lock)."""

    def get(self, path: str) -> tuple[int, dict]:
        if path == "/v1/models":
            return 200, {"data": [{"id": "fake"}]}
        if path == "/get_server_info" and self.info is not None:
            return 200, self.info
        return 404, {"detail": "Not Found"}


@contextlib.contextmanager
def serve(fake: Fake) -> Iterator[str]:
    """Serve ``fake`` on a loopback port until the block ends; yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(*fake.get(self.path.rstrip("/")))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(*fake.post(self.path.rstrip("/"), json.loads(raw or b"{}")))

        def log_message(self, *args) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address) -> None:
            pass  # a client that hung up (a reply it refused); stderr belongs to the command

    httpd = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class Stub(Fake):
    """``complete(prompt, nth) -> (text, completion_tokens, finish_reason)`` (None leaves a
    field out), no logprobs: the evidence tests' servers."""

    def __init__(self, complete) -> None:
        super().__init__(logprobs=False)
        self.fn = complete

    def choice(self, prompt: str, n: int, nth: int, others: list[str], lp: bool) -> dict:
        text, count, finish = self.fn(prompt, nth)
        choice: dict = {"index": 0, "text": text}
        if finish is not None:
            choice["finish_reason"] = finish
        out: dict = {"choices": [choice]}
        if count is not None:
            out["usage"] = {"completion_tokens": count}
        return out


def stub_server(complete):
    """:class:`Stub` served: the old ``(prompt, nth) -> (text, count, finish)`` servers."""
    return serve(Stub(complete))


# One fake per behaviour the engine must judge --------------------------------------------------
_MARKER = re.compile(r"MARK\d+x[0-9a-f]{4}")


def marker_of(prompt: str) -> str | None:
    found = _MARKER.search(prompt)
    return found.group() if found else None


class FirstMarkerCache(Fake):
    """A prefix cache that hands every later request the first request's marker (the first
    one since start, or since the last flush where there is one): the leak the reference run
    shows too when it shares the cache, so comparing the two runs finds nothing."""

    def __init__(self, **kw) -> None:
        kw.setdefault("flush", False)
        super().__init__(**kw)
        self.first: str | None = None

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        mine = marker_of(prompt)
        with self.lock:
            if self.first is None and mine is not None:
                self.first = mine
            first = self.first
        toks = honest(prompt, n)
        return toks if first in (None, mine) else [f" {first}", *toks[1:]]

    def flushed(self) -> None:
        self.first = None


class CacheLeak(Fake):
    """A prefix cache that answers every request after the first (since the last flush) with
    the first one's answer: a leak without a marker, caught only by comparison with a reference
    that does not share the cache."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.first: str | None = None

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        with self.lock:
            if self.first is None and marker_of(prompt):
                self.first = prompt
            first = self.first
        return honest(first or prompt, n)

    def flushed(self) -> None:
        self.first = None


class OverlapCorruption(Fake):
    """Correct alone; while another request is in flight, answers with that request's text (a
    bug only a real batch shows)."""

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        return honest(others[0] if others else prompt, n)


class SameAnswer(Fake):
    """Every prompt gets the same tokens (a model whose weights make the prompt irrelevant): it
    can pass every comparison, and no leak could ever show."""

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        return honest("the same for everyone", n)


class ChangesAfterBatch(Fake):
    """Correct until a batch has run; after it, each prompt alone gets another answer (state
    the batch left behind, which a flush does not clear)."""

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        return honest(prompt + ("|after" if nth >= 2 else ""), n)


class NearTieFlip(Fake):
    """In the batch, the greedy token at ``at`` flips to the runner-up, whose logprob is
    ``margin`` below it in both runs (a near-tie when small); everything after it differs, as
    after any flip. ``leak``: the batch output also holds request r0's marker."""

    def __init__(self, margin: float, at: int = 3, leak: str | None = None, **kw) -> None:
        super().__init__(**kw)
        self.margin, self.at, self.leak = margin, at, leak

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        toks = honest(prompt, n)
        if nth != 1 or n <= self.at:  # the reference runs, a warm-up
            return toks
        flipped = [*toks[: self.at], f"{toks[self.at]}#", *honest(prompt + "#", n)[self.at + 1 :]]
        if self.leak and marker_of(prompt) != self.leak:
            flipped[-1] = f" {self.leak}"
        return flipped

    def margins(self, prompt: str, toks: list[str], nth: int) -> list[float]:
        return [self.margin if k == self.at else WIDE for k in range(len(toks))]


class HugeText(Fake):
    """Completions of ``size`` bytes of text, announced in Content-Length."""

    def __init__(self, size: int, **kw) -> None:
        super().__init__(**kw)
        self.size = size

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        return [" " + "x" * self.size]


class ByteTokens(Fake):
    """Every token decodes to U+FFFD (a byte that is not a whole UTF-8 character, as a
    byte-level vocabulary or CJK text gives), ids distinct. ``swap_at``: in the batch, the token
    there is another id that decodes alike; ``tie``: the top two there are 0 nats apart."""

    def __init__(self, swap_at: int | None = None, tie: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.swap_at, self.tie = swap_at, tie

    def token_text(self, tok: str) -> str:
        return "\ufffd"

    def tokens(self, prompt: str, n: int, nth: int, others: list[str]) -> list[str]:
        toks = honest(prompt, n)
        if nth == 1 and self.swap_at is not None and n > self.swap_at:  # the batch
            k = self.swap_at
            return [*toks[:k], f"{toks[k]}#", *toks[k + 1 :]]
        return toks

    def margins(self, prompt: str, toks: list[str], nth: int) -> list[float]:
        return [0.0 if self.tie and k == self.swap_at else WIDE for k in range(len(toks))]
