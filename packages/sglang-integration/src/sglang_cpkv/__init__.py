"""cpkv for SGLang: the plugin and cpkv-serve (the contamination harness is `cpkv_validate`).

Importing this package does not import sglang or torch: the plugin's hooks import SGLang when
SGLang's ``load_plugins()`` runs them.
"""

# Plugin
# Errors
from sglang_cpkv.errors import (
    CpkvSGLangError,
    DebugPlantError,
    DsaBackendError,
    HookDriftError,
    HookTargetImportError,
    PluginRefused,
    SharedKVError,
    StartRefused,
    UnsupportedSGLangError,
)
from sglang_cpkv.plugin._registered import registered_hooks
from sglang_cpkv.plugin._version_guard import SUPPORTED_RANGE, check_sglang_version
from sglang_cpkv.plugin.entry import activate, load

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 (grouped by topic, house style)
    # Plugin
    "SUPPORTED_RANGE",
    "activate",
    "check_sglang_version",
    "load",
    "registered_hooks",
    # Errors
    "CpkvSGLangError",
    "DebugPlantError",
    "DsaBackendError",
    "HookDriftError",
    "HookTargetImportError",
    "PluginRefused",
    "SharedKVError",
    "StartRefused",
    "UnsupportedSGLangError",
]
