"""A minimal OpenAI ``/v1/completions`` client on the standard library, for the ``http`` engine.

Every way a server can fail us is a :class:`ServerError` (a ``ConnectionError``) whose message is
one line naming the URL and what came back: no answer, a refused connection, bytes that are not
HTTP, a body shorter than its ``Content-Length``, an HTTP error status, a body that is not JSON or
not shaped like the OpenAI API. The command prints that line and exits 2; before, a non-HTTP reply
or a short body escaped as a traceback with exit 1, the code for contamination.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

__all__ = ["Completion", "CompletionsClient", "ServerError"]

_WORD = re.compile(r"\S+")


class ServerError(ConnectionError):
    """The server could not be used: a transport or protocol failure, in one line."""


@dataclass(frozen=True)
class Completion:
    """One greedy completion as the server reported it.

    Attributes:
        tokens: the generated tokens compared (``logprobs.tokens``, else the text split on
            whitespace).
        generated: how many tokens the server says it generated (``usage.completion_tokens``),
            else ``len(tokens)``.
        finish_reason: the server's ``choices[0].finish_reason`` (``"stop"``: it ended the text
            itself; ``"length"``: it hit ``max_tokens``), or None when it gave none.
    """

    tokens: list[str]
    generated: int
    finish_reason: str | None


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CompletionsClient:
    """``/v1/models`` and greedy ``/v1/completions`` (one request per thread).

    Args:
        url: server base URL (``http://host:port`` or ``http://host:port/v1``).
        timeout: seconds per request.
    """

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.timeout = timeout
        self.logprobs = True  # ask for per-token output; dropped if the server refuses it
        self.token_sources: set[str] = set()  # where the compared tokens came from

    def _open(self, url: str, data: bytes | None, method: str | None = None) -> bytes:
        """POST/GET ``url``; the body, or :class:`ServerError` (``HTTPError`` passes through)."""
        req = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method=method
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(_one_line(f"cannot reach {url}: {exc}")) from None
        except http.client.HTTPException as exc:  # not HTTP, a short body, a header too long
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise ServerError(
                _one_line(
                    f"{url} did not answer valid HTTP ({what}); is --url an OpenAI-compatible "
                    f"server?"
                )
            ) from None

    def _call(self, path: str, body: dict | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        raw = self._open(self.base + path, data)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested without end
            raise ServerError(
                f"{self.base}{path} did not answer JSON (it began {raw[:40]!r}); is --url an "
                f"OpenAI-compatible server?"
            ) from None

    def _refused(self, path: str, exc: urllib.error.HTTPError) -> ServerError:
        return ServerError(
            _one_line(
                f"{self.base}{path} answered HTTP {exc.code} {exc.reason}; is --url an "
                f"OpenAI-compatible server (and --model one it serves)?"
            )
        )

    def flush_cache(self) -> str | None:
        """Drop the server's prefix cache (SGLang ``/flush_cache``, vLLM ``/reset_prefix_cache``).

        Returns:
            The endpoint that worked, or None when the server has neither.
        """
        root = self.base[: -len("/v1")]
        for path in ("/flush_cache", "/reset_prefix_cache"):
            try:
                self._open(root + path, b"", method="POST")
            except urllib.error.HTTPError:
                continue
            return path
        return None

    def models(self) -> list[str]:
        """The model names ``/v1/models`` lists."""
        try:
            out = self._call("/models")
        except urllib.error.HTTPError as exc:
            raise self._refused("/models", exc) from None
        data = out.get("data") if isinstance(out, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ServerError(
                f"{self.base}/models did not list models as {{'data': [{{'id': ...}}]}}; pass "
                f"--model NAME"
            )
        return [str(m["id"]) for m in data]

    def generate(self, model: str, prompt: str, max_tokens: int, seed: int) -> Completion:
        """Greedy completion of ``prompt`` (temperature 0, top_p 1, ``seed``)."""
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_p": 1,
            "seed": seed,
        }
        try:
            if self.logprobs:
                try:
                    out = self._call("/completions", {**body, "logprobs": 1})
                except urllib.error.HTTPError as exc:
                    if exc.code not in (400, 422, 501):
                        raise
                    self.logprobs = False
                    return self.generate(model, prompt, max_tokens, seed)
            else:
                out = self._call("/completions", body)
        except urllib.error.HTTPError as exc:
            raise self._refused("/completions", exc) from None
        return self._completion(out)

    def complete(self, model: str, prompt: str, max_tokens: int, seed: int) -> list[str]:
        """Greedy completion of ``prompt``; the generated tokens (see :meth:`generate`)."""
        return self.generate(model, prompt, max_tokens, seed).tokens

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
        toks = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if toks is not None and not (
            isinstance(toks, list) and all(isinstance(t, str) for t in toks)
        ):
            raise self._malformed("choices[0].logprobs.tokens is not a list of strings")
        if not toks and text is not None and not isinstance(text, str):
            raise self._malformed(f"choices[0].text is a {type(text).__name__}, not a string")
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise self._malformed(f"choices[0].finish_reason is {finish!r}, not a string")
        # a server may accept logprobs and still not return them (transformers serve)
        self.token_sources.add("logprobs.tokens" if toks else "whitespace-split text")
        tokens = list(toks) if toks else _WORD.findall(text or "")
        usage = out.get("usage") if isinstance(out, dict) else None
        counted = usage.get("completion_tokens") if isinstance(usage, dict) else None
        generated = counted if type(counted) is int and counted >= 0 else len(tokens)
        return Completion(tokens, generated, finish)

    def _malformed(self, what: str) -> ServerError:
        return ServerError(
            f"{self.base}/completions answered a malformed completion: {what}; is --url an "
            f"OpenAI-compatible server?"
        )
