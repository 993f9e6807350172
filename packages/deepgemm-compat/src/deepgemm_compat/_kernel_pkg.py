"""Minimum-version check on SGLang's kernel package (``sglang-kernel``, formerly ``sgl-kernel``).

The DSA indexer mixes ``sgl_kernel`` ops with DeepGEMM's; an old kernel package next to a
new sgl-deep-gemm fails late and obscurely, so check it up front.

* ``DEEPGEMM_COMPAT_MIN_SGL_KERNEL``: version, the minimum accepted, ``0.4.9`` by default
  (what SGLang 0.5.23 asserts at launch).
* ``DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK``: bool, skip the check, off by default.
"""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass

from cpkv_cli.environment import DEEPGEMM_COMPAT_MIN_SGL_KERNEL, DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK
from packaging.version import InvalidVersion, Version

from deepgemm_compat.errors import InputError, KernelPackageError

MIN_ENV = "DEEPGEMM_COMPAT_MIN_SGL_KERNEL"
SKIP_ENV = "DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK"
DEFAULT_MINIMUM = "0.4.9"
# Renamed from sgl-kernel to sglang-kernel; the import name stayed sgl_kernel.
DIST_NAMES = ("sglang-kernel", "sgl-kernel")


@dataclass(frozen=True)
class KernelPackage:
    """The kernel distribution found (``name`` None if none) and the minimum applied."""

    name: str | None
    version: str | None
    minimum: str
    ok: bool
    message: str


def find_kernel_package(minimum: str | None = None) -> KernelPackage:
    """Report which kernel package is installed and whether it meets ``minimum``.

    Args:
        minimum: the lowest accepted version; ``None`` reads ``DEEPGEMM_COMPAT_MIN_SGL_KERNEL``
            (default ``0.4.9``).

    Raises:
        InputError: ``minimum`` (or the variable) is not a version.
    """
    source = "minimum" if minimum else MIN_ENV
    minimum = minimum or DEEPGEMM_COMPAT_MIN_SGL_KERNEL.read(error=InputError) or DEFAULT_MINIMUM
    try:
        floor = Version(minimum)
    except InvalidVersion:
        raise InputError(
            f"{source}={minimum!r} is not a version; fix: set it to one such as "
            f"{DEFAULT_MINIMUM}, or unset it for that default"
        ) from None
    for name in DIST_NAMES:
        try:
            version = md.version(name)
        except md.PackageNotFoundError:
            continue
        ok = Version(version) >= floor
        msg = f"{name} {version}" + ("" if ok else f" is older than the minimum {minimum}")
        return KernelPackage(name, version, minimum, ok, msg)
    return KernelPackage(
        None, None, minimum, False, f"neither {' nor '.join(DIST_NAMES)} is installed"
    )


def check_kernel_package(minimum: str | None = None) -> KernelPackage:
    """Raise KernelPackageError unless the kernel package meets ``minimum``.

    Skipped (returns the report, ok or not) with ``DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK=1``.
    """
    found = find_kernel_package(minimum)
    if found.ok or DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK.read(error=InputError):
        return found
    raise KernelPackageError(
        f'{found.message}; fix: pip install "sglang-kernel>={found.minimum}" '
        f"(or set {MIN_ENV} to another minimum, or {SKIP_ENV}=1 to skip this check)"
    )
