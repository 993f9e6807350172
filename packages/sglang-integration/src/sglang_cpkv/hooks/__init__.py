"""The plugin's hooks on SGLang.

Importing this package does not import sglang: targets are resolved when the plugin registers.
"""

from __future__ import annotations

from sglang_cpkv.hooks._framework import HookSpec, check_target, register, signature_of
from sglang_cpkv.hooks._specs import SHARED_KV_SPECS, SPECS

__all__ = ["SHARED_KV_SPECS", "SPECS", "HookSpec", "check_target", "register", "signature_of"]
