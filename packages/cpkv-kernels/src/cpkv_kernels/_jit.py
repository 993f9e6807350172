"""JIT build of the CUDA extension: spec -> cache key -> lock -> re-check -> build -> load.

Builds go to ``$CPKV_CACHE_DIR/<name>.<digest>/`` (``key.json``, ``build.log`` and the library
side by side). A directory counts as built only once its ``key.json`` exists (written atomically,
last), so a build killed half-way is redone. Concurrent builders (processes or threads) serialise
on a file lock and re-check after acquiring it: one compiles, the others load its result.

Environment (read at build time):

- ``CPKV_CACHE_DIR``: path, where built kernels live, ``~/.cache/cpkv`` by default.
- ``TORCH_CUDA_ARCH_LIST``: archs to build for, the visible GPUs' by default (9.0 with none).
- ``CUDA_HOME``: the toolkit, by default the one of ``nvcc`` on PATH, else ``/usr/local/cuda``.
- ``CXX``: the host compiler, ``c++`` by default.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from cpkv_cli.environment import CPKV_CACHE_DIR
from filelock import FileLock  # a dependency of torch itself

from ._jit_key import CSRC, CacheKey, JitSpec, cache_key, cuda_home, gen_ops_spec, gencode_flags
from .errors import KernelBuildError

__all__ = ["BuildResult", "build", "cache_root", "load"]

_THREAD_LOCK = threading.Lock()
_LOADED: dict[str, BuildResult] = {}


@dataclass(frozen=True)
class BuildResult:
    """Where a build lives. ``built`` is True when this call compiled it (False: cache hit)."""

    library: Path
    directory: Path
    key: CacheKey
    built: bool


def cache_root() -> Path:
    """``$CPKV_CACHE_DIR``, else ``~/.cache/cpkv``.

    Raises:
        KernelBuildError: ``CPKV_CACHE_DIR`` names something that is not a directory.
    """
    return CPKV_CACHE_DIR.read(error=KernelBuildError) or Path.home() / ".cache" / "cpkv"


def _lib_name(key: CacheKey) -> str:
    return f"{key.name}_{key.digest()[:12]}"


def _complete(directory: Path, key: CacheKey) -> bool:
    try:
        meta = json.loads((directory / "key.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("digest") == key.digest() and (directory / meta.get("library", "-")).exists()


def _write_json_atomic(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _cpp_extension(home: Path):
    import torch.utils.cpp_extension as cpp_extension

    # cpp_extension resolves CUDA_HOME once at import (from `which nvcc`, wrong for a wrapper
    # script such as /usr/local/bin/nvcc); point it at the toolkit the cache key describes.
    cpp_extension.CUDA_HOME = str(home)
    return cpp_extension


def _compile(spec: JitSpec, key: CacheKey, directory: Path, verbose: bool) -> Path:
    log = directory / "build.log"
    name = _lib_name(key)
    cpp_extension = _cpp_extension(cuda_home())
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cpp_extension.load(
                name=name,
                sources=[str(s) for s in spec.sources],
                extra_cflags=list(spec.cflags),
                extra_cuda_cflags=[*spec.cuda_cflags, *gencode_flags(key.arch_list)],
                extra_ldflags=list(spec.ldflags),
                extra_include_paths=[str(CSRC)],
                build_directory=str(directory),
                is_python_module=False,
                verbose=verbose,
            )
        except Exception as exc:
            log.write_text(f"{json.dumps(dataclasses.asdict(key), indent=2)}\n\n{exc}\n")
            raise KernelBuildError(
                f"building the CUDA extension {spec.name!r} failed ({type(exc).__name__}); "
                f"compiler output: {log}"
            ) from exc
    notes = "\n".join(f"warning: {w.message}" for w in caught)
    log.write_text(f"built {name} in {time.monotonic() - start:.1f}s\n{notes}\n")
    return directory / f"{name}.so"


def build(spec: JitSpec | None = None, *, verbose: bool = False) -> BuildResult:
    """Build ``spec`` (default: every cpkv op) unless its cache directory already holds it.

    Raises:
        KernelBuildError: no toolkit, or the compiler failed (the message names ``build.log``).
    """
    spec = spec or gen_ops_spec()
    key = cache_key(spec)
    directory = cache_root() / f"{spec.name}.{key.digest()}"
    library = directory / f"{_lib_name(key)}.so"
    if _complete(directory, key):
        return BuildResult(library, directory, key, built=False)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory.parent / f"{directory.name}.lock")):
        if _complete(directory, key):  # another builder finished while we waited
            return BuildResult(library, directory, key, built=False)
        directory.mkdir(exist_ok=True)
        library = _compile(spec, key, directory, verbose)
        meta = {**dataclasses.asdict(key), "digest": key.digest(), "library": library.name}
        _write_json_atomic(directory / "key.json", meta)
    return BuildResult(library, directory, key, built=True)


def load(spec: JitSpec | None = None) -> BuildResult:
    """Build if needed and load the library into this process (once per spec name)."""
    spec = spec or gen_ops_spec()
    with _THREAD_LOCK:
        if spec.name in _LOADED:
            return _LOADED[spec.name]
        result = build(spec)
        if os.path.realpath(result.library) not in torch.ops.loaded_libraries:
            try:
                torch.ops.load_library(str(result.library))
            except OSError as exc:
                raise KernelBuildError(f"loading {result.library} failed: {exc}") from exc
        _LOADED[spec.name] = result
        return result
