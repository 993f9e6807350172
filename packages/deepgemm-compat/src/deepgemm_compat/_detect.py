"""What is installed, and whether it can load, decided before ``import deep_gemm``.

Every sgl-deep-gemm wheel ships a ``_C.so`` linked against one torch build; importing it
under another torch fails (or, with lazy binding, dies at the first kernel call), so the
pairing is checked from package metadata and the ELF symbol tables first. Nothing here
imports ``deep_gemm`` or ``torch``.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpkv_cli.environment import DEEPGEMM_COMPAT_ALLOW_UNTESTED
from packaging.version import InvalidVersion, Version

from deepgemm_compat import _elf
from deepgemm_compat.errors import InputError

# Pairing of sgl-deep-gemm releases with torch, read from the wheels on PyPI
# (scripts/gen_surfaces.py -> tests/fixtures/surfaces.json): a torch minor is listed
# when every libtorch/libc10 symbol the release's _C.so imports is exported by that
# torch's CUDA wheel. What breaks the neighbours:
#   <= 0.1.5.post1 need c10::impl::cow::materialize_cow_storage       (gone in 2.13)
#   0.1.5.post2+   need c10::ValueError(SourceLocation, std::string)  (new in 2.13)
#   0.2.0, 0.2.1   need c10_cuda_check_implementation(int, ..., bool) (changed in 2.14)
#   0.2.1.post1+   need c10::cuda::CUDAErrorLogCapture                (new in 2.14)
# Loader: <= 0.2.2 load _C through apache-tvm-ffi (pinned exactly by Requires-Dist);
# 0.2.3+ register TORCH_LIBRARY ops and need no tvm-ffi.
#   first,         last,          torch minors,             loader,          tvm-ffi pin
PAIRING: tuple[tuple[str, str, tuple[str, ...], str, str | None], ...] = (
    ("0.0.1", "0.1.3", ("2.10", "2.11", "2.12"), "tvm_ffi", "0.1.9"),
    ("0.1.4", "0.1.5.post1", ("2.10", "2.11", "2.12"), "tvm_ffi", "0.1.11"),
    ("0.1.5.post2", "0.1.7", ("2.13", "2.14"), "tvm_ffi", "0.1.11"),
    ("0.2.0", "0.2.1", ("2.13",), "tvm_ffi", "0.1.11"),
    ("0.2.1.post1", "0.2.2", ("2.14",), "tvm_ffi", "0.1.11"),
    ("0.2.3", "0.2.5", ("2.14",), "torch_library", None),
)
NEWEST_CHECKED = "0.2.5"

# What to install for a torch minor: the GPU-verified 0.1.4.post1 for 2.10-2.12, the
# newest that loads on 2.13, and on 2.14 the release SGLang 0.5.23 pins (0.2.5 removed
# fp8_paged_mqa_logits, which SGLang itself still calls).
RECOMMENDED = {
    "2.10": "0.1.4.post1",
    "2.11": "0.1.4.post1",
    "2.12": "0.1.4.post1",
    "2.13": "0.2.1",
    "2.14": "0.2.3.post2",
}

ALLOW_UNTESTED_ENV = "DEEPGEMM_COMPAT_ALLOW_UNTESTED"


def _v(text: str) -> Version:
    return Version(text)


def pairing_for(version: str) -> tuple[str, str, tuple[str, ...], str, str | None] | None:
    """The PAIRING row covering ``version``; ``None`` when it is outside every row."""
    v = _v(version)
    for row in PAIRING:
        if _v(row[0]) <= v <= _v(row[1]):
            return row
    return None


def torch_minor(torch_version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"2.11"``."""
    release = Version(torch_version).release
    return f"{release[0]}.{release[1]}"


def install_line(torch_version: str | None) -> str:
    """The exact ``pip install`` line for the installed torch (newest known torch if none)."""
    minor = torch_minor(torch_version) if torch_version else max(RECOMMENDED, key=_v)
    dg = RECOMMENDED.get(minor)
    if dg is None:
        known = ", ".join(sorted(RECOMMENDED, key=_v))
        return f"# no sgl-deep-gemm wheel is known to load on torch {minor} (known: {known})"
    row = pairing_for(dg)
    tvm = f' "apache-tvm-ffi=={row[4]}"' if row and row[4] else ""
    return f'pip install "sgl-deep-gemm=={dg}"{tvm}'


@dataclass
class Problem:
    """One finding; ``blocking`` ones stop ``load()``. ``code`` names the error class."""

    code: str
    message: str
    fix: str
    blocking: bool = True


@dataclass
class Environment:
    """Facts about the installation, all read without importing deep_gemm or torch."""

    deep_gemm_version: str | None = None
    providers: list[str] = field(default_factory=list)
    torch_version: str | None = None
    tvm_ffi_version: str | None = None
    so_path: str | None = None
    torch_lib_dir: str | None = None
    missing_symbols: list[str] | None = None  # None: not checked
    allow_untested: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)  # finds, never executes, a top-level package
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def collect(check_symbols: bool = True, providers: bool = True) -> Environment:
    """Read versions, file locations and (optionally) the ELF symbol check.

    Args:
        check_symbols: read ``_C.so`` and libtorch's dynamic symbols (about a second).
        providers: list the distributions that install a top-level ``deep_gemm``.
    """
    env = Environment(
        deep_gemm_version=_dist_version("sgl-deep-gemm"),
        torch_version=_dist_version("torch"),
        tvm_ffi_version=_dist_version("apache-tvm-ffi"),
        allow_untested=DEEPGEMM_COMPAT_ALLOW_UNTESTED.read(error=InputError),
    )
    dg_dir, torch_dir = _package_dir("deep_gemm"), _package_dir("torch")
    if dg_dir is not None and (dg_dir / "_C.so").exists():
        env.so_path = str(dg_dir / "_C.so")
        if env.deep_gemm_version is None and (dg_dir / "VERSION").exists():
            env.deep_gemm_version = (dg_dir / "VERSION").read_text().strip()
    if torch_dir is not None and (torch_dir / "lib").is_dir():
        env.torch_lib_dir = str(torch_dir / "lib")
    if providers:
        env.providers = sorted(set(md.packages_distributions().get("deep_gemm", [])))
    if check_symbols and env.so_path and env.torch_lib_dir:
        env.missing_symbols = _elf.missing_torch_symbols(env.so_path, env.torch_lib_dir)
    return env


def diagnose(env: Environment) -> list[Problem]:
    """Turn the facts into findings, each with one message and one fix."""
    out: list[Problem] = []
    fix_install = install_line(env.torch_version)
    if env.torch_version is None:
        out.append(Problem("missing", "torch is not installed", "pip install torch"))
        return out
    if env.deep_gemm_version is None:
        out.append(Problem("missing", "sgl-deep-gemm is not installed", fix_install))
        return out
    dg, tv = env.deep_gemm_version, env.torch_version
    if len(env.providers) > 1:
        out.append(
            Problem(
                "conflict",
                f"deep_gemm is installed by several distributions ({', '.join(env.providers)}); "
                "the one installed last overwrote the others' files",
                f"pip uninstall {' '.join(p for p in env.providers if p != 'sgl-deep-gemm')}"
                f' && pip install --force-reinstall --no-deps "sgl-deep-gemm=={dg}"',
                blocking=False,
            )
        )
    try:
        row = pairing_for(dg)
        newer = _v(dg) > _v(NEWEST_CHECKED)
    except InvalidVersion:
        row, newer = None, False
    if row is None:
        untested = (
            f"sgl-deep-gemm {dg} is not among the releases this deepgemm-compat was built "
            f"from (0.0.1 - {NEWEST_CHECKED}); its Python surface and torch pairing are unknown"
        )
        fix = f"{fix_install}   (or set {ALLOW_UNTESTED_ENV}=1 to try it anyway)"
        out.append(Problem("untested", untested, fix, blocking=newer and not env.allow_untested))
    minor = torch_minor(tv)
    if env.missing_symbols:
        shown = ", ".join(env.missing_symbols[:3])
        out.append(
            Problem(
                "torch-abi",
                f"sgl-deep-gemm {dg}'s _C.so needs {len(env.missing_symbols)} symbol(s) that torch "
                f"{tv} does not export ({shown}); import or the first kernel call would fail",
                fix_install,
            )
        )
    elif row is not None and minor not in row[2] and env.missing_symbols is None:
        out.append(
            Problem(
                "torch-abi",
                f"sgl-deep-gemm {dg} was built against torch {'/'.join(row[2])}, "
                f"but torch {tv} is installed; its _C.so would not load",
                fix_install,
            )
        )
    if row is not None and row[3] == "tvm_ffi":
        pin = row[4]
        if env.tvm_ffi_version is None:
            out.append(
                Problem(
                    "tvm-ffi",
                    f"sgl-deep-gemm {dg} loads its _C.so through apache-tvm-ffi, "
                    "which is not installed",
                    f'pip install "apache-tvm-ffi=={pin}"',
                )
            )
        elif env.tvm_ffi_version != pin:
            out.append(
                Problem(
                    "tvm-ffi",
                    f"sgl-deep-gemm {dg} pins apache-tvm-ffi=={pin}, "
                    f"but {env.tvm_ffi_version} is installed",
                    f'pip install "apache-tvm-ffi=={pin}"',
                    blocking=False,
                )
            )
    return out


def loader_kind(version: str | None) -> str | None:
    """``"tvm_ffi"`` (<= 0.2.2) or ``"torch_library"`` (0.2.3+); ``None`` if unknown."""
    if version is None:
        return None
    try:
        row = pairing_for(version)
    except InvalidVersion:
        return None
    if row is not None:
        return row[3]
    return "torch_library" if _v(version) > _v(NEWEST_CHECKED) else None
