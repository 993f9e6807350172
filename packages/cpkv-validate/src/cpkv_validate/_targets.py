"""Where ``cpkv-validate`` talks to outside itself, checked the way it will be used.

- :func:`check_output_path`: ``--json PATH`` can be written, found out before the run (a probe
  file is created next to it and removed), so a run is not wasted on a report it cannot keep.
- :func:`check_url`: ``--url`` is a server base URL urllib can open, with the fix named.

Each failure is one :class:`cpkv_cli.InputError` line (the conventions every cpkv command keeps).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
import urllib.parse
from pathlib import Path

from cpkv_cli import InputError

__all__ = ["check_output_path", "check_url"]


def check_output_path(path: str, flag: str = "--json") -> None:
    """Raise :class:`InputError` unless a report can be written to ``path``.

    The directory must exist, ``path`` must not be a directory or anything but a regular file,
    its name must fit the file system, and a file must be creatable next to it (checked by
    creating and removing one: permission bits alone say nothing when running as root, on a
    read-only mount or in /proc).
    """
    p = Path(path)
    if path == "" or path.endswith(os.sep):
        raise InputError(f"{flag} {path!r}: give a file path, e.g. {flag} report.json")
    try:
        _check_place(p, flag)
    except OSError as exc:  # a path too long for the system, a loop of links, ...
        raise InputError(f"{flag} {_short(path)}: {exc.strerror}; give another path") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name[:32]}.", dir=p.parent)
    except OSError as exc:
        raise InputError(
            f"{flag} {_short(path)}: cannot create a file in {p.parent} ({exc.strerror}); give a "
            f"writable directory"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _check_place(p: Path, flag: str) -> None:
    parent = p.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(f"{flag} {_short(p)}: {parent} {what}; create it or give another path")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    size = len(p.name.encode(errors="surrogateescape"))
    if size > name_max:
        raise InputError(
            f"{flag}: the file name is {size} bytes; {parent} allows {name_max}; give a "
            f"shorter name"
        )
    if p.is_dir():
        raise InputError(f"{flag} {p} is a directory; give a file path inside it")
    if p.exists() and not p.is_file():
        raise InputError(f"{flag} {p} is not a regular file; give a file path")


def _short(path: str | Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


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
