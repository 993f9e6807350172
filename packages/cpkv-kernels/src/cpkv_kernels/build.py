"""``python -m cpkv_kernels.build``: pre-build the CUDA extension into the cache (for images).

Prints where the library went. The build is keyed like a first-use build (docs/design.md, "Ops
and backends"), so a process that later runs with the same torch, toolchain and arch list loads it
without compiling. No GPU is needed: without one the arch list defaults to 9.0 (H100/H200).
"""

from __future__ import annotations

import argparse
import os
import sys

from ._jit import build
from .errors import KernelBuildError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cpkv_kernels.build",
        description="Build the cpkv CUDA kernels into the JIT cache and print where they went.",
    )
    parser.add_argument(
        "--cache-dir", help="cache root (default: $CPKV_CACHE_DIR or ~/.cache/cpkv)"
    )
    parser.add_argument(
        "--arch",
        help="arch list, e.g. '9.0' or '9.0;10.0' (default: $TORCH_CUDA_ARCH_LIST, the visible "
        "GPUs, else 9.0); processes that load the build must resolve the same list",
    )
    parser.add_argument("--verbose", action="store_true", help="show the compiler commands")
    args = parser.parse_args(argv)
    if args.cache_dir:
        os.environ["CPKV_CACHE_DIR"] = args.cache_dir
    if args.arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = args.arch
    try:
        result = build(verbose=args.verbose)
    except KernelBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'built' if result.built else 'already built'}: {result.library}")
    print(f"key: {result.directory / 'key.json'} (archs {', '.join(result.key.arch_list)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
