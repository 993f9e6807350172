"""Start-up of one SGLang process with ``--cpkv-shared-kv``'s hooks, after a planted change.

``python _skv_start_driver.py CASE`` does what every SGLang process does first,
``sglang.srt.plugins.load_plugins()`` (with ``CPKV_SHARED_KV=1`` inherited, as ``cpkv-serve``
sets it), after planting what a future release or a second plugin could do:

- ``none``: nothing (the control: hooks load, and ``apply_hooks`` checks they took);
- ``renamed_method``: SGLang renamed ``PageInterleaveKVPoolMixin._prefetch_layer``;
- ``renamed_state``: SGLang's ``_init_page_shard_state`` sets ``self._batch_epoch`` where it set
  ``self._epoch`` (the method is SGLang's own source with that one name changed, loaded from a
  file so it can be read the way the check reads SGLang);
- ``hook_fails_to_apply``: another plugin registers an AROUND hook on the pool class our class
  REPLACE targets; SGLang's ``apply_hooks`` raises on that target, logs it, and leaves SGLang's
  class in place.

Prints ``LOADED <hooks>`` when the process would serve.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import tempfile
import textwrap
from pathlib import Path


def _rename_state() -> None:
    from sglang.srt.mem_cache import page_interleave_pool as pip

    src = textwrap.dedent(inspect.getsource(pip.PageInterleaveKVPoolMixin._init_page_shard_state))
    src = src.replace("self._epoch", "self._batch_epoch")
    folder = Path(tempfile.mkdtemp())
    header = (
        "from __future__ import annotations\n"
        "from sglang.srt.mem_cache.page_interleave_pool import *\n"
        "from sglang.srt.mem_cache.page_interleave_pool import (\n"
        "    _NUM_SCRATCH_SLOTS, _ScratchSlot, _symmetric_scratch_supported)\n"
    )
    (folder / "renamed_state.py").write_text(header + src)
    sys.path.insert(0, str(folder))
    module = importlib.import_module("renamed_state")
    pip.PageInterleaveKVPoolMixin._init_page_shard_state = module._init_page_shard_state


def main(case: str) -> None:
    if case == "renamed_method":
        from sglang.srt.mem_cache import page_interleave_pool as pip

        cls = pip.PageInterleaveKVPoolMixin
        cls._prefetch_layer_for = cls._prefetch_layer
        del cls._prefetch_layer
    elif case == "renamed_state":
        _rename_state()
    elif case == "hook_fails_to_apply":
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        def timer(original, *args, **kwargs):  # another plugin's hook, wrongly on a class
            return original(*args, **kwargs)

        HookRegistry.register(
            "sglang.srt.mem_cache.page_interleave_pool.PageInterleaveDSATokenToKVPool",
            timer, HookType.AROUND,
        )  # fmt: skip
    elif case != "none":
        raise SystemExit(f"unknown case {case!r}")
    from sglang.srt.plugins import load_plugins
    from sglang_cpkv.plugin.entry import registered_hooks

    load_plugins()
    print("LOADED", ",".join(registered_hooks()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
