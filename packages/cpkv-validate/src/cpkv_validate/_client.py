"""A minimal client for the ``http`` engine (standard library only): OpenAI ``/v1/completions``,
or SGLang's own ``/generate`` where the server is SGLang.

Why ``/generate`` on SGLang: ``/v1/completions`` names tokens by their decoded text and keys its
top logprobs by that text. A byte token that is not a whole UTF-8 character decodes to U+FFFD,
so two different tokens read as equal (a real difference hidden) and a top-two pair of them
collapses into one key (its margin unknown, or taken against the third). Byte-level vocabularies
and CJK text are full of such tokens. ``/generate`` answers token ids and top logprobs by id.

Each request runs under one deadline and one reply cap (``_transport``). Every way a server can
fail us is a :class:`ServerError` whose message is one line naming the URL and what came back:
no answer in time, a refused connection, bytes that are not HTTP, a body cut short or too large,
an HTTP error status, a body that is not JSON or not shaped like the OpenAI API. The command
prints that line and exits 2 (exit 1 means contamination).

Tokens are counted from the reply itself: the token ids (``/generate``), else ``logprobs.tokens``,
else the words of the text. The
server's ``usage.completion_tokens`` is kept beside that count, never used for it: a server
answered one word and said 32.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ._drift import top2_margin
from ._limits import MAX_REPLY_MIB
from ._transport import Reply, ServerError, fetch, one_line

__all__ = ["Completion", "CompletionsClient", "ServerError"]

_WORD = re.compile(r"\S+")
#: Where SGLang lists its server arguments (``enable_deterministic_inference`` among them).
SERVER_INFO = ("/get_server_info", "/server_info")
#: Cache flushes: SGLang, vLLM.
FLUSHES = ("/flush_cache", "/reset_prefix_cache")
#: SGLang's native generation endpoint (token ids, top logprobs by id).
NATIVE = "/generate"
#: Which endpoint generates: ``auto`` takes ``/generate`` where ``/get_server_info`` answered
#: (SGLang) and falls back to ``/v1/completions`` if ``/generate`` is not there.
APIS = ("auto", "generate", "completions")


@dataclass(frozen=True)
class Completion:
    """One greedy completion as the server answered it.

    Attributes:
        text: the generated text (``choices[0].text``, else the tokens joined).
        tokens: the units compared: token ids as decimal strings (``/generate``), else
            ``logprobs.tokens``, else the text split on whitespace.
        source: ``"ids"``, ``"logprobs"`` or ``"words"``, where ``tokens`` came from.
        margins: per token, the gap between its top two logprobs (``top_logprobs``), or None
            where the server gave no top logprobs at all.
        usage: the server's own count (``usage.completion_tokens``), or None; shown, not used.
        finish_reason: ``choices[0].finish_reason`` (``"stop"``, ``"length"``) or None.
    """

    text: str
    tokens: list[str]
    source: str
    margins: list[float | None] | None
    usage: int | None
    finish_reason: str | None


class CompletionsClient:
    """``/v1/models``, greedy ``/v1/completions`` and SGLang's extras (one request per thread).

    Args:
        url: server base URL (``http://host:port`` or ``http://host:port/v1``).
        timeout: seconds per whole request, connect to last byte.
        max_reply_bytes: largest reply read; a larger one is refused.
        api: one of :data:`APIS`; ``generate`` fails where the server has no ``/generate``.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 120.0,
        max_reply_bytes: int = MAX_REPLY_MIB << 20,
        api: str = "auto",
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api={api!r} is not one of {', '.join(APIS)}")
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.root = self.base[: -len("/v1")]
        self.timeout, self.max_bytes = timeout, max_reply_bytes
        self.logprobs = True  # ask for top-2 logprobs; dropped if the server refuses them
        self.api = api
        self.native = api == "generate"  # auto: set by server_info() when SGLang answers
        self.native_used = False  # a /generate reply was used: no fallback from then on

    def _fetch(self, url: str, body: dict | None = None, method: str | None = None) -> Reply:
        data = None if body is None else json.dumps(body).encode()
        method = method or ("GET" if data is None else "POST")
        return fetch(url, data=data, method=method, timeout=self.timeout, max_bytes=self.max_bytes)

    def _json(self, reply: Reply, url: str) -> object:
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested without end
            raise ServerError(
                f"{url} did not answer JSON (it began {reply.body[:40]!r}); is --url an "
                f"OpenAI-compatible server?"
            ) from None

    def _refused(self, url: str, reply: Reply) -> ServerError:
        return ServerError(
            one_line(
                f"{url} answered HTTP {reply.status} {reply.reason}; is --url an "
                f"OpenAI-compatible server (and --model one it serves)?"
            )
        )

    def models(self) -> list[str]:
        """The model names ``/v1/models`` lists."""
        url = self.base + "/models"
        reply = self._fetch(url)
        if reply.status != 200:
            raise self._refused(url, reply)
        out = self._json(reply, url)
        data = out.get("data") if isinstance(out, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ServerError(
                f"{url} did not list models as {{'data': [{{'id': ...}}]}}; pass --model NAME"
            )
        return [str(m["id"]) for m in data]

    def server_info(self) -> tuple[str, dict] | None:
        """(endpoint, SGLang's server arguments) where the server lists them, else None."""
        for path in SERVER_INFO:
            reply = self._fetch(self.root + path)
            if reply.status != 200:
                continue
            try:
                info = json.loads(reply.body)
            except (ValueError, RecursionError):
                continue
            if isinstance(info, dict):
                if self.api == "auto":  # SGLang's (either path): its /generate has token ids
                    self.native = True
                return path, info
        return None

    def flush_cache(self) -> str | None:
        """Drop the server's prefix cache; the endpoint that did, or None when none did."""
        for path in FLUSHES:
            if self._fetch(self.root + path, method="POST").status == 200:
                return path
        return None

    def generate(self, model: str, prompt: str, max_tokens: int, seed: int) -> Completion:
        """Greedy completion of ``prompt`` (temperature 0, top_p 1), with top-2 logprobs where
        the server takes them: by ``/generate`` while :attr:`native` (see
        :meth:`_generate_native`), else by ``/v1/completions`` (with ``model`` and ``seed``)."""
        if self.native:
            native = self._generate_native(prompt, max_tokens)
            if native is not None:
                return native
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_p": 1,
            "seed": seed,
        }
        url = self.base + "/completions"
        if self.logprobs:
            reply = self._fetch(url, {**body, "logprobs": 2})
            if reply.status in (400, 422, 501):
                self.logprobs = False
        if not self.logprobs:
            reply = self._fetch(url, body)
        if reply.status != 200:
            raise self._refused(url, reply)
        return self._completion(self._json(reply, url))

    def complete(self, model: str, prompt: str, max_tokens: int, seed: int) -> list[str]:
        """Greedy completion of ``prompt``; the generated tokens (see :meth:`generate`)."""
        return self.generate(model, prompt, max_tokens, seed).tokens

    def _generate_native(self, prompt: str, max_tokens: int) -> Completion | None:
        """SGLang's ``/generate``, greedy, with the top two logprobs of each output token.

        Under ``api="auto"``, before any ``/generate`` reply was used: None (and
        ``/v1/completions`` from then on) where the path is not there (404, 405), refuses the
        body (400, 422), or answers something not shaped like SGLang's (a server answering every
        path alike). After one was used, a failure is a :class:`ServerError`: switching to text
        mid-run would compare text tokens with ids. No ``seed`` and no ``model`` are sent:
        ``/generate`` serves its one model, and greedy decoding draws nothing.
        """
        url = self.root + NATIVE
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0, "top_p": 1, "max_new_tokens": max_tokens},
            "return_logprob": True,
            "top_logprobs_num": 2,
        }
        may_fall_back = self.api == "auto" and not self.native_used
        reply = self._fetch(url, body)
        if reply.status in (400, 404, 405, 422) and may_fall_back:
            self.native = False
            return None
        if reply.status != 200:
            raise ServerError(
                one_line(
                    f"{url} answered HTTP {reply.status} {reply.reason}; is --url SGLang? "
                    f"(--api completions asks /v1/completions instead)"
                )
            )
        try:
            out = self._native(self._json(reply, url), url)
        except ServerError:
            if not may_fall_back:
                raise
            self.native = False
            return None
        self.native_used = True
        return out

    def _native(self, out: object, url: str) -> Completion:
        """A ``/generate`` body: ``meta_info.output_token_logprobs`` is ``[logprob, id, text]``
        per output token, ``meta_info.output_top_logprobs`` the top entries of each (None for a
        position without them); without logprobs, ``output_ids`` alone (no margins)."""
        meta = out.get("meta_info") if isinstance(out, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        pairs = meta.get("output_token_logprobs")
        if isinstance(pairs, list) and all(
            isinstance(p, list) and len(p) >= 2 and _is_int(p[1]) for p in pairs
        ):
            ids = [p[1] for p in pairs]
            top = meta.get("output_top_logprobs")
        else:
            ids = out.get("output_ids") if isinstance(out, dict) else None
            top = None
        if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
            raise ServerError(
                f"{url} answered without token ids (meta_info.output_token_logprobs as [logprob, "
                f"token id, text] per token, or output_ids; got {str(out)[:60]!r}); is --url "
                f"SGLang? (--api completions uses /v1/completions instead)"
            )
        text = out.get("text")  # type: ignore[union-attr]
        if not isinstance(text, str):
            raise ServerError(f"{url} answered a malformed completion: text is not a string")
        margins = [top2_margin(t) for t in top] if isinstance(top, list) else None
        if margins is not None and all(m is None for m in margins):
            margins = None
        finish = meta.get("finish_reason")
        finish = finish.get("type") if isinstance(finish, dict) else finish
        counted = meta.get("completion_tokens")
        return Completion(
            text=text,
            tokens=[str(i) for i in ids],
            source="ids",
            margins=margins,
            usage=_count(counted),
            finish_reason=finish if isinstance(finish, str) else None,
        )

    def _completion(self, out: object) -> Completion:
        """``choices[0]`` of a completions body, checked field by field."""
        try:
            choice = out["choices"][0]  # type: ignore[index]
            text = choice.get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServerError(
                f"{self.base}/completions answered without choices[0] (got {str(out)[:60]!r}); "
                f"is --url an OpenAI-compatible server?"
            ) from None
        logprobs = choice.get("logprobs")
        logprobs = logprobs if isinstance(logprobs, dict) else {}
        toks = logprobs.get("tokens")
        if toks is not None and not (
            isinstance(toks, list) and all(isinstance(t, str) for t in toks)
        ):
            raise self._malformed("choices[0].logprobs.tokens is not a list of strings")
        if text is not None and not isinstance(text, str):
            raise self._malformed(f"choices[0].text is a {type(text).__name__}, not a string")
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise self._malformed(f"choices[0].finish_reason is {finish!r}, not a string")
        # a server may accept logprobs and still not return them (transformers serve)
        tokens = list(toks) if toks else _WORD.findall(text or "")
        top = logprobs.get("top_logprobs") if toks else None
        margins = [top2_margin(t) for t in top] if isinstance(top, list) else None
        if margins is not None and all(m is None for m in margins):
            margins = None
        usage = out.get("usage") if isinstance(out, dict) else None
        counted = usage.get("completion_tokens") if isinstance(usage, dict) else None
        return Completion(
            text=text if text is not None else "".join(tokens),
            tokens=tokens,
            source="logprobs" if toks else "words",
            margins=margins,
            usage=_count(counted),
            finish_reason=finish,
        )

    def _malformed(self, what: str) -> ServerError:  # (/v1/completions)
        return ServerError(
            f"{self.base}/completions answered a malformed completion: {what}; is --url an "
            f"OpenAI-compatible server?"
        )


def _is_int(x: object) -> bool:
    return type(x) is int


def _count(x: object) -> int | None:
    """A server's own token count where it is a count (never a bool or a negative)."""
    return x if type(x) is int and x >= 0 else None
