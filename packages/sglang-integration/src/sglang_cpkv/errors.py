"""Exceptions raised by the SGLang plugin and ``cpkv-serve``.

```
CpkvSGLangError
 ├── UnsupportedSGLangError(RuntimeError)  the installed sglang is outside the tested range
 ├── HookDriftError(RuntimeError)          a hook target's signature no longer matches
 ├── HookTargetImportError(ImportError)    a hook target's module raised while importing
 ├── DebugPlantError(ValueError)           a debug-only plant (CPKV_DEBUG_*) asked for wrongly
 ├── DsaBackendError(ValueError)           DSA prefill/decode backends cannot share the KV pool
 └── SharedKVError(ValueError)             --cpkv-shared-kv cannot serve this deployment
PluginRefused(SystemExit)                  what the entry point raises for any of the above
StartRefused(SystemExit)                   stops an SGLang process before it serves (a hook did
                                           not take, SGLang built another KV pool than ours)
```

``sglang.srt.plugins.load_plugins()`` logs and swallows every ``Exception`` a plugin raises and
then serves without it. A plugin that refuses must stop the process instead, so the entry point
turns a :class:`CpkvSGLangError` into :class:`PluginRefused`, a ``SystemExit`` that carries the
message to stderr. Resolution errors (:class:`DsaBackendError`) are raised inside SGLang's
argument resolution, which does not swallow them, and stay ``ValueError`` like SGLang's own; so does
:class:`SharedKVError`, raised by the shared-KV gate during resolution.
"""

from __future__ import annotations


class CpkvSGLangError(Exception):
    """Base class of the plugin's errors."""


class UnsupportedSGLangError(CpkvSGLangError, RuntimeError):
    """The installed sglang release is outside the range this plugin was tested against."""


class HookDriftError(CpkvSGLangError, RuntimeError):
    """A hook target is missing or its signature differs from the one the hook was written for."""


class HookTargetImportError(CpkvSGLangError, ImportError):
    """A hook target's module exists but raised while importing (a dependency of SGLang missing,
    ``No module named 'cffi'``): told apart from a target that does not exist, so the message
    names the import that failed instead of blaming the sglang release."""


class DebugPlantError(CpkvSGLangError, ValueError):
    """A debug-only plant is asked for wrongly: ``CPKV_DEBUG_FAULT`` without its acknowledgement
    or naming no fault, ``CPKV_DEBUG_BREAK_HOOK`` naming no registered hook (``plugin._debug``)."""


class DsaBackendError(CpkvSGLangError, ValueError):
    """The DSA prefill and decode backends cannot run together on this GPU and KV-cache dtype."""


class PluginRefused(SystemExit):
    """The plugin refused to load; raised from the entry point so ``load_plugins()`` cannot
    swallow it (it catches ``Exception``, and ``SystemExit`` is not one)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"sglang-cpkv plugin refused to load: {message}")


class SharedKVError(CpkvSGLangError, ValueError):
    """``--cpkv-shared-kv`` cannot serve this deployment (the message lists every reason)."""


class StartRefused(SystemExit):
    """Stops an SGLang process before it serves: a registered hook did not take, or the KV pool
    SGLang built is not the one ``--cpkv-shared-kv`` installs. A ``SystemExit``, so neither
    ``load_plugins()`` nor a scheduler's ``except Exception`` turns it into a logged warning."""

    def __init__(self, message: str) -> None:
        super().__init__(f"sglang-cpkv stopped SGLang before serving: {message}")
