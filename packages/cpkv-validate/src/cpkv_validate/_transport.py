"""One HTTP request under one deadline and one size cap, on the standard library.

``--timeout`` bounds the whole request, connect to last byte: every socket read waits only for
what is left of the deadline, so a server that trickles its reply a byte a second is cut off at
the deadline (urllib's timeout bounds each read, and such a server held the tool forever). The
body is read in chunks and refused past ``max_bytes`` (a reply announced larger is refused
before its body is read): a 100 MB reply was read whole, 545 MB of memory.

Every failure is a :class:`ServerError` (a ``ConnectionError``) in one line naming the URL: the
command prints it and exits 2, never 1, which means contamination.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import time
import urllib.parse
from dataclasses import dataclass

__all__ = ["CHUNK", "Reply", "ServerError", "fetch", "one_line"]

#: Bytes asked of the socket per read of the body.
CHUNK = 1 << 16


class ServerError(ConnectionError):
    """The server could not be used: a transport or protocol failure, in one line."""


@dataclass(frozen=True)
class Reply:
    """An answer with its status; the body read whole, at most the cap."""

    status: int
    reason: str
    body: bytes


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each waiting only for what is left of ``deadline`` (monotonic).

    Reads go through the socket's own raw file, which keeps the descriptor open after the
    connection closes its socket (``Connection: close``), as ``http.client`` expects."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self.sock, self.deadline = sock, deadline
        self.raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self.sock.settimeout(left)
        return self.raw.readinto(buf)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _DeadlineSocket:
    """What :class:`http.client.HTTPResponse` asks of its socket: a reader (``makefile``)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def makefile(self, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))


class _Response(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: object, deadline: float, **kw: object) -> None:
        super().__init__(_DeadlineSocket(sock, deadline), *args, **kw)  # type: ignore[arg-type]


def fetch(
    url: str,
    *,
    data: bytes | None = None,
    method: str = "GET",
    timeout: float,
    max_bytes: int,
) -> Reply:
    """``method url`` (JSON ``data`` when given), the whole of it within ``timeout`` seconds.

    Raises:
        ServerError: no answer in time, no connection, not HTTP, a body cut short or over
            ``max_bytes`` (one line each).
    """
    deadline = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout)
    conn.response_class = functools.partial(_Response, deadline=deadline)  # type: ignore[assignment]
    headers = {"Content-Type": "application/json", "Connection": "close"}
    try:
        conn.connect()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        conn.sock.settimeout(left)  # sending too waits only for what is left
        conn.request(method, parts.path or "/", body=data, headers=headers)
        resp = conn.getresponse()
        return Reply(resp.status, resp.reason, _body(resp, url, max_bytes))
    except ServerError:  # a reply too large (a ConnectionError, so an OSError too)
        raise
    except TimeoutError:
        raise ServerError(
            f"{url} timed out: no whole answer within --timeout {timeout:g} s (connect to last "
            f"byte); raise --timeout, or check the server"
        ) from None
    except OSError as exc:  # refused, reset, closed without a reply
        raise ServerError(one_line(f"cannot reach {url}: {exc}")) from None
    except http.client.HTTPException as exc:  # not HTTP, a short body, a header too long
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        fix = "is --url an OpenAI-compatible server?"
        raise ServerError(one_line(f"{url} did not answer valid HTTP ({what}); {fix}")) from None
    finally:
        conn.close()


def _body(resp: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    """The body, in chunks, at most ``max_bytes``; a promise of more is refused unread."""
    if resp.length is not None and resp.length > max_bytes:
        raise _too_big(url, f"announced {resp.length:,} bytes", max_bytes)
    out = bytearray()
    while chunk := resp.read(CHUNK):
        out += chunk
        if len(out) > max_bytes:
            raise _too_big(url, f"sent over {max_bytes:,} bytes", max_bytes)
    if resp.length:  # the connection closed before Content-Length was met
        raise http.client.IncompleteRead(bytes(out), resp.length)
    return bytes(out)


def _too_big(url: str, what: str, max_bytes: int) -> ServerError:
    return ServerError(
        f"{url} {what}, over the reply cap (--max-reply-mib {max_bytes / 2**20:g}); raise it, or "
        f"check the server"
    )
