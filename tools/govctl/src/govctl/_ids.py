"""Work item IDs and file names for `govctl work new`.

Strategies (gov/config.toml `[work_item] id_strategy`, names as upstream govctl):

| strategy              | ID                          | across branches                        |
|-----------------------|-----------------------------|----------------------------------------|
| `random` (default)    | `WI-2026-11-29-a3f9`        | no shared counter to race on           |
| `author-hash`         | `WI-2026-11-29-7c1e-001`    | per-author namespace (sha256 of email) |
| `sequential`          | `WI-2026-11-29-001`         | two branches both pick 001             |

`random` draws 16 bits from `secrets`, re-drawing on a local clash; two branches can still
pick the same suffix on the same day (p = 1/65,536 per pair of items), and `check` reports that
as E020. The upstream ID pattern fixes the suffix at 4 hex digits, so it cannot be longer.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import subprocess
from collections.abc import Collection

_SLUG_RE = re.compile(r"[^a-z0-9]+")


def slugify(title: str, max_len: int = 60) -> str:
    """`"Fix the FP8 KV packing!"` -> `"fix-the-fp8-kv-packing"` (cut at a dash, <= max_len)."""
    slug = _SLUG_RE.sub("-", title.lower()).strip("-")
    if len(slug) > max_len:
        cut = slug.rfind("-", 0, max_len + 1)
        slug = slug[: cut if cut > 0 else max_len]
    return slug or "item"


def author_email() -> str:
    """`git config user.email`, else $GIT_AUTHOR_EMAIL / $EMAIL, else user@host."""
    try:
        email = subprocess.run(
            ["git", "config", "user.email"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        email = ""
    return (
        email
        or os.environ.get("GIT_AUTHOR_EMAIL")
        or os.environ.get("EMAIL")
        or f"{os.environ.get('USER', 'user')}@{os.uname().nodename}"
    )


def _next_seq(prefix: str, existing: Collection[str]) -> str:
    pat = re.compile(re.escape(prefix) + r"(\d{3})")
    used = [int(m.group(1)) for i in existing if (m := pat.fullmatch(i))]
    n = max(used, default=0) + 1
    if n > 999:
        raise ValueError(f"{prefix}NNN: all 999 sequence numbers are used")
    return f"{prefix}{n:03d}"


def new_id(strategy: str, date: str, existing: Collection[str], *, email: str | None = None) -> str:
    """A fresh ID for an item created on `date` ("YYYY-MM-DD") that is not in `existing`."""
    if strategy == "sequential":
        return _next_seq(f"WI-{date}-", existing)
    if strategy == "author-hash":
        h = hashlib.sha256((email or author_email()).strip().lower().encode()).hexdigest()[:4]
        return _next_seq(f"WI-{date}-{h}-", existing)
    if strategy == "random":
        start = secrets.randbelow(1 << 16)
        for i in range(1 << 16):
            # 64 random draws, then a sweep from a random start: finds the last free suffix too
            n = secrets.randbelow(1 << 16) if i < 64 else (start + i) % (1 << 16)
            candidate = f"WI-{date}-{n:04x}"
            if candidate not in existing:
                return candidate
        raise ValueError(f"all 65,536 random IDs for {date} are taken")
    raise ValueError(f"unknown id_strategy {strategy!r}")
