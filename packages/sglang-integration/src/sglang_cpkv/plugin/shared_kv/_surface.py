"""The private SGLang surface cpkv's sharded pool stands on, checked before SGLang serves.

``CpkvSharedKVPool`` subclasses SGLang 0.5.23's ``PageInterleaveDSATokenToKVPool`` and overrides
or reads names SGLang keeps private. A release that renames one of them would not fail loudly:
an override of a method SGLang no longer calls is silently dead, and a state attribute it no
longer sets fails mid-forward. :func:`private_surface_problems` lists, by name, what moved:

- methods we override or call, on SGLang's classes, with the parameters we wrap;
- state attributes we read, found as ``self.<name> = ...`` in the methods of SGLang's classes
  (read from their source: nothing is constructed);
- the method resolution we depend on: past ``PageInterleaveKVPoolMixin``, ``set_mla_kv_buffer``
  is the unsharded store of ``memory_pool`` (the pool persists owned rows through it);
- module-level names we import.

The plugin runs it when it registers the shared-KV hooks, and the pool runs
:func:`missing_state` on itself after SGLang's constructor.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from typing import Any

__all__ = ["METHODS", "STATE", "missing_state", "private_surface_problems"]

_PIP = "sglang.srt.mem_cache.page_interleave_pool"
_MP = "sglang.srt.mem_cache.memory_pool"

#: (module, class, method, parameters as plugin._framework.signature_of renders them)
METHODS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (_PIP, "PageInterleaveDSATokenToKVPool", "_create_index_key_cache", ("self",)),
    (_PIP, "PageInterleaveDSATokenToKVPool", "_gather_pairs", ("self", "local_layer")),
    (_PIP, "PageInterleaveDSATokenToKVPool", "set_mla_kv_buffer",
     ("self", "layer", "loc_info", "cache_k_nope", "cache_k_rope", "layer_id_override=")),
    (_PIP, "PageInterleaveKVPoolMixin", "begin_shard_extend",
     ("self", "req_to_token", "req_pool_indices", "prefix_lens_cpu", "seq_lens_cpu")),
    (_PIP, "PageInterleaveKVPoolMixin", "end_shard_extend", ("self",)),
    (_PIP, "PageInterleaveKVPoolMixin", "translate_loc_to_scratch", ("self", "loc")),
    (_PIP, "PageInterleaveKVPoolMixin", "_translate_loc_cached", ("self", "loc")),
    (_PIP, "PageInterleaveKVPoolMixin", "_get_write_plan", ("self", "loc")),
    (_PIP, "PageInterleaveKVPoolMixin", "_prefetch_layer", ("self", "layer_id")),
    (_PIP, "PageInterleaveKVPoolMixin", "_acquire_slot_for_read", ("self", "layer_id")),
    (_PIP, "_PageInterleaveIndexKeyCache", "_scratch_pages", ("self", "layer_id", "page_indices")),
    (_PIP, "_PageInterleaveIndexKeyCache", "write_targets", ("self", "layer_id", "loc")),
    (_MP, "MLATokenToKVPool", "_write_mla_kv_buffer",
     ("self", "dst_buffer", "loc", "cache_k_nope", "cache_k_rope")),
)  # fmt: skip

#: (module, class whose methods, with its bases', must assign ``self.<attribute>``, attributes)
STATE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (_PIP, "PageInterleaveDSATokenToKVPool", (
        "_shard_extend_active", "_slots", "_epoch", "_block_pages", "_translate_cache",
        "_write_plan_key", "kv_gather_comm", "kv_gather_stream", "device_module",
        "shard_size", "shard_rank", "layer_transfer_counter", "start_layer", "layer_num",
        "index_buf_size", "page_size", "size",
    )),
    (_PIP, "_ScratchSlot", ("tensors", "ready", "resident_key")),
)  # fmt: skip

#: module-level names the pool and its hooks import
NAMES: tuple[tuple[str, str], ...] = (
    (_PIP, "PageInterleaveKVPoolMixin"),
    (_PIP, "PyNcclCommunicator"),
    (_MP, "unwrap_write_loc"),
    ("sglang.srt.layers.attention.dsa.utils", "can_dsa_prefill_cp_interleave"),
)


def _assigned(cls: type) -> set[str]:
    """Attributes assigned as ``self.<name> = ...`` in the methods of ``cls`` and its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "sglang":
            continue
        for fn in vars(klass).values():
            fn = getattr(fn, "__func__", fn)
            if not inspect.isfunction(fn):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            except (OSError, TypeError, SyntaxError):
                continue
            for node in ast.walk(tree):
                # ``self.x += 1`` needs x set elsewhere: only plain assignments establish it
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign):
                    targets = [node.target]
                else:
                    continue
                for t in targets:
                    for sub in ast.walk(t):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                                and sub.value.id == "self"):  # fmt: skip
                            names.add(sub.attr)
    return names


def _upstream(module: str, name: str) -> Any:
    """SGLang's own ``module.name`` (the original class, also after the plugin replaced it)."""
    value = getattr(importlib.import_module(module), name)
    if getattr(value, "cpkv_shared_kv", False):  # our subclass: its base is SGLang's class
        value = value.__mro__[1]
    return value


def private_surface_problems() -> list[str]:
    """Every private name of SGLang the shared-KV pool relies on that moved (empty: none)."""
    from sglang_cpkv.plugin._framework import signature_of

    problems: list[str] = []
    for module, name in NAMES:
        if not hasattr(importlib.import_module(module), name):
            problems.append(f"{module}.{name} is gone")
    for module, cls, method, params in METHODS:
        owner = _upstream(module, cls)
        fn = getattr(owner, method, None)
        if fn is None:
            problems.append(f"{cls}.{method} is gone")
        elif signature_of(fn) != params:
            problems.append(f"{cls}.{method} now takes ({', '.join(signature_of(fn))}), "
                            f"written for ({', '.join(params)})")  # fmt: skip
    for module, cls, attrs in STATE:
        assigned = _assigned(_upstream(module, cls))
        problems += [f"{cls} no longer sets self.{a}" for a in attrs if a not in assigned]
    pip, mp = importlib.import_module(_PIP), importlib.import_module(_MP)
    mro = _upstream(_PIP, "PageInterleaveDSATokenToKVPool").__mro__
    if pip.PageInterleaveKVPoolMixin in mro:
        after = mro[mro.index(pip.PageInterleaveKVPoolMixin) + 1 :]
        store = next((k for k in after if "set_mla_kv_buffer" in vars(k)), None)
        if store is None or store.__module__ != mp.__name__:
            where = "nothing" if store is None else f"{store.__module__}.{store.__qualname__}"
            problems.append(f"past PageInterleaveKVPoolMixin, set_mla_kv_buffer resolves to "
                            f"{where}, not memory_pool's unsharded store")  # fmt: skip
    else:
        problems.append("PageInterleaveDSATokenToKVPool no longer derives from "
                        "PageInterleaveKVPoolMixin")  # fmt: skip
    return problems


def missing_state(pool: Any) -> list[str]:
    """State attributes of :data:`STATE` a constructed pool (and its first slot) lacks."""
    _, _, pool_attrs = STATE[0]
    _, _, slot_attrs = STATE[1]
    out = [f"self.{a}" for a in pool_attrs if not hasattr(pool, a)]
    slots = getattr(pool, "_slots", None) or []
    if slots:
        out += [f"_slots[0].{a}" for a in slot_attrs if not hasattr(slots[0], a)]
    return out
