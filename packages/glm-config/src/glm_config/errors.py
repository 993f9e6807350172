"""Exceptions raised by glm_config.

```
GlmConfigError
 ├── ConfigFileError(ValueError)  config.json is missing, unreadable, not an object, or its DSA
 │                                settings are invalid (indexcache rejects the schedule)
 ├── NotDsaError(ValueError)      the model is not a DSA model: it has no indexer settings
 ├── SettingError(ValueError)     `glm-config set`: unknown key, malformed or out-of-range value
 └── WriteRefusedError(ValueError) `glm-config set` will not write: config.json already has
                                  errors or is read-only (--force overrides both), or it changed
                                  while being edited
```
Every message names the file or key, what was expected, what was found, and the fix.
"""

from __future__ import annotations


class GlmConfigError(Exception):
    """Base class of every glm_config error."""


class ConfigFileError(GlmConfigError, ValueError):
    """config.json cannot be used as the source of truth."""


class NotDsaError(GlmConfigError, ValueError):
    """The model has no DSA indexer (no index_topk; model_type not glm_moe_dsa / deepseek_v32)."""


class SettingError(GlmConfigError, ValueError):
    """An assignment given to ``glm-config set`` is refused; config.json is left untouched."""


class WriteRefusedError(GlmConfigError, ValueError):
    """``glm-config set`` will not write over this config.json; it is left untouched."""
