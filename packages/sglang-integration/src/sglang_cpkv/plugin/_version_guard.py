"""Refuse sglang releases the plugin was not tested against.

The hooks patch private SGLang functions whose names and signatures change between releases.
The range is ``_releases.TESTED`` (0.5.20, the first release with ``arg_groups`` resolution hooks
and the ``sglang.srt.plugins`` entry-point group, to the newest release CI runs the contract
tests against). The version is read from the distribution metadata (``importlib.metadata``),
never by importing sglang, so the check costs microseconds and runs before any hook touches
SGLang.

Env vars:
    ``CPKV_ALLOW_UNTESTED_SGLANG``: ``1`` turns the refusal into a warning (default: unset).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os

from cpkv_cli.environment import CPKV_ALLOW_UNTESTED_SGLANG

from sglang_cpkv.errors import UnsupportedSGLangError
from sglang_cpkv.plugin._releases import TESTED, parse_release, release

logger = logging.getLogger("sglang_cpkv")

SUPPORTED_MIN = release(TESTED[0])
SUPPORTED_MAX = release(TESTED[-1])
ALLOW_ENV = "CPKV_ALLOW_UNTESTED_SGLANG"


def _fmt(release: tuple[int, int, int]) -> str:
    return ".".join(map(str, release))


SUPPORTED_RANGE = f"{_fmt(SUPPORTED_MIN)} <= sglang <= {_fmt(SUPPORTED_MAX)}"


def installed_sglang_version() -> str | None:
    """The installed sglang distribution's version string, or None when it is not installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_supported(version: str) -> bool:
    """Whether ``version``'s release (post/dev/local parts ignored) lies in the tested range."""
    release = parse_release(version)
    return release is not None and SUPPORTED_MIN <= release <= SUPPORTED_MAX


def check_sglang_version(version: str | None = None, *, env: dict[str, str] | None = None) -> str:
    """Return the sglang version if supported; otherwise refuse (or warn when allowed).

    Args:
        version: the version to check; default: the installed distribution's.
        env: environment to read ``CPKV_ALLOW_UNTESTED_SGLANG`` from; default ``os.environ``.

    Returns:
        The checked version string.

    Raises:
        UnsupportedSGLangError: sglang is missing, or outside :data:`SUPPORTED_RANGE` and
            ``CPKV_ALLOW_UNTESTED_SGLANG`` is not ``1``.
    """
    env = os.environ if env is None else env
    if version is None:
        version = installed_sglang_version()
    if version is None:
        raise UnsupportedSGLangError(
            f"sglang is not installed; the cpkv plugin supports {SUPPORTED_RANGE}. "
            f"Fix: pip install 'sglang>={_fmt(SUPPORTED_MIN)},<={_fmt(SUPPORTED_MAX)}'."
        )
    if is_supported(version):
        return version
    message = (
        f"sglang {version} is outside the supported range {SUPPORTED_RANGE}: the plugin's hooks "
        f"patch SGLang internals that change between releases. Fix: install a supported sglang "
        f"(e.g. pip install 'sglang=={_fmt(SUPPORTED_MAX)}'), or set {ALLOW_ENV}=1 to load the "
        f"plugin anyway (each hook still checks its target's signature and refuses on drift)."
    )
    if CPKV_ALLOW_UNTESTED_SGLANG.read(env, error=UnsupportedSGLangError):
        logger.warning("%s Continuing because %s=1.", message, ALLOW_ENV)
        return version
    raise UnsupportedSGLangError(message)
