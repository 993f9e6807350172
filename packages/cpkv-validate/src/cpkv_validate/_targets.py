"""``--url`` checked the way it will be used: :func:`check_url` (``--json``: ``_json_target``).

Each failure is one :class:`cpkv_cli.InputError` line (the conventions every cpkv command keeps).
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from cpkv_cli import InputError

__all__ = ["check_url"]


def check_url(url: str) -> None:
    """Raise :class:`InputError` unless ``url`` is an ``http(s)://host[:port][/path]`` base URL.

    Refused: other schemes, no host, a host that is neither an IP address nor a DNS name (labels
    of 1-63 characters, 253 in all), a port outside 1-65535, whitespace or control characters,
    and a query or fragment (the client appends ``/v1/...`` to the base).
    """
    shown = url if len(url) <= 80 else url[:77] + "..."
    fix = "give the server's base URL, e.g. --url http://127.0.0.1:30000"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InputError(f"--url {shown!r} contains whitespace or control characters; {fix}")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"--url {shown!r}: {exc}; {fix}") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"--url must start with http:// or https://, got {shown!r}; {fix}")
    host = parts.hostname or ""
    if not host:
        raise InputError(f"--url {shown!r} names no host; {fix}")
    if not _is_ip(host) and not _is_dns_name(host):
        raise InputError(
            f"--url {shown!r}: host {host[:40]!r} is not an IP address or a DNS name (labels "
            f"of 1-63 letters, digits or '-', 253 characters in all); {fix}"
        )
    if port == 0:
        raise InputError(f"--url {shown!r}: port 0 cannot be connected to; {fix}")
    if parts.query or parts.fragment:
        raise InputError(f"--url {shown!r} has a query or fragment; {fix}")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_dns_name(host: str) -> bool:
    try:
        ascii_host = host.encode("idna").decode("ascii")  # internationalised names too
    except UnicodeError:
        return False
    labels = ascii_host.rstrip(".").split(".")
    return len(ascii_host) <= 253 and all(
        0 < len(lb) <= 63 and all(c.isalnum() or c in "-_" for c in lb) for lb in labels
    )
