"""Repair DSA/IndexCache config fields that some transformers releases drop."""

from glm_config._files import read_config_json
from glm_config._normalize import Change, NormalizeReport, normalize
from glm_config._releases import TRANSFORMERS_DEFECTS, Defect, defects_for, transformers_version
from glm_config._settings import DsaSettings, expected_settings, is_dsa
from glm_config._tiny import TINY_SHARPEN, tiny_glm51_config, write_tiny_checkpoint
from glm_config._validate import config_errors
from glm_config.errors import (
    ConfigFileError,
    GlmConfigError,
    NotDsaError,
    SettingError,
    WriteRefusedError,
)

__version__ = "0.1.0"

# Grouped by topic (house style), not alphabetically.
__all__ = [  # noqa: RUF022
    # Normalisation
    "normalize",
    "NormalizeReport",
    "Change",
    # Settings
    "DsaSettings",
    "expected_settings",
    "is_dsa",
    "config_errors",
    "read_config_json",
    # Releases
    "Defect",
    "TRANSFORMERS_DEFECTS",
    "defects_for",
    "transformers_version",
    # Test checkpoints
    "TINY_SHARPEN",
    "tiny_glm51_config",
    "write_tiny_checkpoint",
    # Errors
    "GlmConfigError",
    "ConfigFileError",
    "NotDsaError",
    "SettingError",
    "WriteRefusedError",
]
