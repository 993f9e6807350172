"""The SGLang releases the plugin supports: the one place that says which.

Read by the version guard (``_version_guard``), by ``cpkv-serve`` (``--cpkv-shared-kv`` needs a
release with the sharded KV pool) and by CI's range step (``scripts/sglang-range``), which runs
the plugin's contract tests (every hook target resolves with the parameters the hook wraps, the
plugin loads through ``load_plugins()``, argument resolution with the plugin active gives the
expected backends and schedule) against each release's own Python source. The README, the
package README, ``docs/design.md``, ``docs/deploy.md`` and the package's ``sglang`` extra state
the same range; ``tests/test_range_docs.py`` holds them to this module.

Each older release runs on the workspace's locked torch and transformers (sglang 0.5.20 and
0.5.21 pin torch 2.13.0 and transformers 5.12.1, 0.5.22 and 0.5.23 torch 2.14.1 and transformers
5.19.0): the contract tests import only Python source, and it runs there.
"""

from __future__ import annotations

import re

from sglang_cpkv.errors import SharedKVError

__all__ = [
    "SHARED_KV_FIRST",
    "SHARED_KV_NEEDS",
    "TESTED",
    "check_shared_kv_release",
    "parse_release",
    "release",
    "shared_kv_release_problem",
]

#: Every release the plugin accepts; CI runs the contract tests against each. 0.5.20 is the first
#: with ``arg_groups`` (resolution hooks) and the ``sglang.srt.plugins`` entry-point group.
TESTED: tuple[str, ...] = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")

#: The first release with the KV-sharding pool ``--cpkv-shared-kv`` builds on.
SHARED_KV_FIRST = "0.5.22"

#: What that release added (0.5.20 has none of it; 0.5.21 has the module without the class).
SHARED_KV_NEEDS: tuple[str, ...] = (
    "sglang.srt.mem_cache.page_interleave_pool.PageInterleaveDSATokenToKVPool",
    "sglang.srt.arg_groups.kv_shard_hook",
)


_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")


def release(version: str) -> tuple[int, ...]:
    """``"0.5.22"`` -> ``(0, 5, 22)`` (the releases above are plain ``X.Y.Z``)."""
    return tuple(int(part) for part in version.split("."))


def parse_release(version: str) -> tuple[int, int, int] | None:
    """``"0.5.23.post1"`` -> ``(0, 5, 23)`` (a leading ``v``, pre/post/dev and local parts
    ignored); None when the string has no ``X.Y.Z`` release."""
    match = _RELEASE.match(version)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def shared_kv_release_problem(version: str) -> str | None:
    """Why ``--cpkv-shared-kv`` cannot run on sglang ``version`` (None: it can), without the fix:
    the release is older than :data:`SHARED_KV_FIRST`, so it has no sharded KV pool."""
    current = parse_release(version)
    if current is None or current >= release(SHARED_KV_FIRST):
        return None
    return (
        f"--cpkv-shared-kv needs SGLang's sharded KV pool ({SHARED_KV_NEEDS[0]}), first in "
        f"sglang {SHARED_KV_FIRST}; the installed sglang is {version}"
    )


def check_shared_kv_release(version: str) -> None:
    """Refuse ``--cpkv-shared-kv`` on an SGLang release older than :data:`SHARED_KV_FIRST`.

    Checked by ``cpkv-serve`` before SGLang is imported. On such a release the plugin's shared-KV
    hooks would find no target and refuse anyway, but only after SGLang's import, and naming a
    hook rather than the release to install.

    Raises:
        SharedKVError: one line naming the release that first has the sharded pool.
    """
    problem = shared_kv_release_problem(version)
    if problem is not None:
        raise SharedKVError(
            f"{problem}. Fix: pip install 'sglang>={SHARED_KV_FIRST},<={TESTED[-1]}', or drop "
            f"--cpkv-shared-kv"
        )
