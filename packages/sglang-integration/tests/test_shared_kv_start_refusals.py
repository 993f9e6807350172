"""No silent fallback: a hook that did not take, or a private SGLang name that moved, stops the
process before it serves, with one line.

Each case is one fresh process doing what every SGLang process does first,
``load_plugins()``, with ``CPKV_SHARED_KV=1`` (``_skv_start_driver.py``), after planting what a
future release or a second plugin could do. SGLang's ``HookRegistry.apply_hooks`` logs and
swallows the failure of a target; the plugin's check after it must not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import _sglang_env
import pytest

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS

DRIVER = Path(__file__).parent / "_skv_start_driver.py"
CASES = ("none", "renamed_method", "renamed_state", "hook_fails_to_apply")


@pytest.fixture(scope="module")
def started() -> dict[str, SimpleNamespace]:
    """Every case, in parallel processes."""
    env = {**os.environ, "CPKV_SHARED_KV": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("CPKV_DISABLE_HOOKS", None)
    procs = {
        case: subprocess.Popen(
            [sys.executable, str(DRIVER), case],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for case in CASES
    }
    out = {}
    for case, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=900)
        lines = [x for x in stderr.splitlines() if x.strip()]
        out[case] = SimpleNamespace(code=proc.returncode, stdout=stdout, stderr=stderr,
                                    last=lines[-1] if lines else "")  # fmt: skip
    return out


def test_control_loads_and_checks(started):
    r = started["none"]
    assert r.code == 0, r.stderr[-3000:]
    assert "shared-kv-pool" in r.stdout and "shared-kv-pool-check" in r.stdout


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("renamed_method", "PageInterleaveKVPoolMixin._prefetch_layer is gone"),
        ("renamed_state", "PageInterleaveDSATokenToKVPool no longer sets self._epoch"),
    ],
)
def test_a_moved_private_name_refuses_by_name(started, case, says):
    r = started[case]
    assert r.code == 1
    assert r.last.startswith("sglang-cpkv plugin refused to load: --cpkv-shared-kv relies on")
    assert says in r.last and "sglang 0.5.23" in r.last
    assert "Traceback" not in r.stderr  # refused before any hook was registered


def test_a_hook_that_fails_to_apply_stops_the_process(started):
    r = started["hook_fails_to_apply"]
    assert r.code == 1
    target = "sglang.srt.mem_cache.page_interleave_pool.PageInterleaveDSATokenToKVPool"
    assert r.last.startswith(
        f"sglang-cpkv stopped SGLang before serving: hook shared-kv-pool -> {target} did not "
        "take on sglang 0.5.23"
    )
    # SGLang logged its own failure (with its traceback) and carried on; ours is the last word
    assert "Failed to apply hooks to sglang.srt.mem_cache.page_interleave_pool" in r.stderr
    assert r.stderr.count("sglang-cpkv stopped SGLang") == 1
    assert "LOADED" not in r.stdout


def test_the_pool_check_refuses_sglangs_own_sharded_pool(plugin):
    """What ``shared-kv-pool-check`` sees after SGLang built the pool: SGLang's class (the
    REPLACE did not take) stops the scheduler; cpkv's class and an unsharded pool pass."""
    from sglang.srt.mem_cache import page_interleave_pool as pip
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang_cpkv.errors import StartRefused
    from sglang_cpkv.plugin.shared_kv._hooks import check_built_pool
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    upstream = CpkvSharedKVPool.__mro__[1]
    assert upstream.__module__ == pip.__name__ and not getattr(upstream, "cpkv_shared_kv", False)
    sharded = SimpleNamespace(kv_shard_rank=0)
    for cls, refused in ((upstream, True), (CpkvSharedKVPool, False)):
        pool = object.__new__(cls)
        pool.index_key_cache = None
        if refused:
            with pytest.raises(StartRefused, match=r"built a PageInterleaveDSATokenToKVPool"):
                check_built_pool(pool, sharded)
        else:
            check_built_pool(pool, sharded)
    replica = object.__new__(DSATokenToKVPool)
    replica.index_key_cache = None
    check_built_pool(replica, SimpleNamespace(kv_shard_rank=None))
    with pytest.raises(StartRefused):  # sharding on, yet an unsharded DSA pool came back
        check_built_pool(replica, sharded)


def test_the_installed_sglang_has_the_surface_and_a_wrapper_is_recognised(plugin):
    from sglang_cpkv.plugin._applied import calls_hook
    from sglang_cpkv.plugin.shared_kv._surface import private_surface_problems

    assert private_surface_problems() == []

    def hook(original, *a):
        return original(*a)

    def wrapper(*a):  # SGLang's AROUND wrapper closes over the hook
        return hook(print, *a)

    def other(*a):
        return print(*a)

    assert calls_hook(wrapper, hook) and calls_hook(hook, hook)
    assert not calls_hook(other, hook)
    other.__wrapped__ = wrapper  # a second plugin wrapping ours
    assert calls_hook(other, hook)
