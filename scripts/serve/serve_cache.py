"""The serve suite's compile caches, carried from one GPU call to the next.

A fresh GPU box compiles every Triton kernel a served request needs on its first use, one after
another inside SGLang's scheduler: 14 to 46 s apiece there (2026-12-07, one core busy and 15 idle,
with an ABI shim, since removed, preloaded into every compiler),
so the first request of a cold server outlasted a 4-minute wait three times. SGLang keeps
what it compiles under ``SGLANG_CACHE_DIR`` (Triton, inductor, the CUDA JIT cache, FlashInfer,
DeepGEMM), and its own ninja-built JIT kernels (``sglang/kernels/jit``) under
``SGLANG_JIT_CACHE_DIR``, which is *not* inside it when unset (``~/.cache/sglang/jit``); so
``scripts/gpu-suite`` points the first at one folder and the second at its ``jit/``. Each call
packs the folder into ``$OUT/serve-cache.tar.xz`` and the next call carries it back as
``.serve-cache/``: a kernel compiled once is a cache hit in every later call of the session.

Two subcommands:

- ``prune DIR`` (on the box, before packing): drops the Triton IR text (``.ttir``, ``.ttgir``,
  ``.llir``, ``.ptx``, ``.source``) from each kernel's cache group and rewrites the group to match.
  A cache hit reads only the group's metadata and the cubin, but Triton treats a group that lists
  a missing file as a miss, so files are never deleted without the rewrite. Prints what the cache
  holds, per subsystem, and the Triton kernels by name.
- ``keep PACK`` (here, after a call): copies a returned pack to ``.serve-cache/serve-cache.tar.xz``
  so that it fits what one call may carry (64 MiB: the working tree, ``.serve-carry/`` and this);
  when it does not, it repacks it without the subsystems least worth their bytes, in the order of
  :data:`DROP_ORDER`, and says which it dropped (never Triton's: then it refuses, exit 2).

This is how the suite runs on that box, not something users need: their servers keep their caches.
Exit 2 with one line for bad input.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

IR_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".source")
#: subsystems (top-level folders of SGLANG_CACHE_DIR) left out, in this order, when a pack must
#: shrink: the CUDA driver's PTX JIT cache and inductor are the least used by this server. Triton is
#: never left out (it is what the first request waits on): a pack it alone overfills is refused
DROP_ORDER = ("nv", "inductor", "cute_aot", ".cache", "jit", "deep_gemm")
CALL_LIMIT = 64 << 20  # what one device call carries, working tree included
MARGIN = 1 << 20  # git's view of the tree and the tool's may differ by a little


def prune_triton_ir(triton_dir: Path) -> tuple[int, int]:
    """Drop IR text from every Triton cache group under ``triton_dir``; returns (groups, bytes)."""
    groups = freed = 0
    for grp in sorted(triton_dir.glob("*/__grp__*.json")):
        data = json.loads(grp.read_text())
        children: dict[str, str] = data.get("child_paths") or {}
        keep = {}
        for name, path in children.items():
            if name.endswith(IR_SUFFIXES):
                p = grp.parent / Path(path).name  # this folder's file, also in a copied cache
                if p.exists():
                    freed += p.stat().st_size
                    p.unlink()
            else:
                keep[name] = path
        if keep != children:
            tmp = grp.with_name(f".{grp.name}.tmp")
            tmp.write_text(json.dumps({**data, "child_paths": keep}))
            os.replace(tmp, grp)  # a reader sees the old group or the new, never half of one
        groups += 1
    return groups, freed


def triton_kernels(triton_dir: Path) -> list[str]:
    """The kernels the Triton cache holds (each group's name, ``__grp__<kernel>.json``)."""
    names = {g.name[len("__grp__") : -len(".json")] for g in triton_dir.glob("*/__grp__*.json")}
    return sorted(names)


def subsystem_sizes(cache_dir: Path) -> dict[str, tuple[int, int]]:
    """Top-level folder -> (files, bytes)."""
    sizes: dict[str, tuple[int, int]] = {}
    for top in sorted(p for p in cache_dir.iterdir() if p.is_dir()):
        files = [f for f in top.rglob("*") if f.is_file()]
        sizes[top.name] = (len(files), sum(f.stat().st_size for f in files))
    return sizes


def prune(cache_dir: Path) -> str:
    """The ``prune`` report: one line per subsystem, then the Triton kernels."""
    triton = cache_dir / "triton"
    groups, freed = prune_triton_ir(triton) if triton.is_dir() else (0, 0)
    head = (
        f"serve cache {cache_dir}: {groups} Triton kernel groups, {freed >> 10} KiB of IR left out"
    )
    lines = [head]
    for name, (files, size) in subsystem_sizes(cache_dir).items():
        lines.append(f"  {name}: {files} files, {size >> 10} KiB")
    if groups:
        lines.append("  Triton kernels: " + ", ".join(triton_kernels(triton)))
    return "\n".join(lines)


def travelling_bytes(repo: Path) -> int:
    """What a call sends beside the cache: tracked and untracked-not-ignored files, .serve-carry."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout  # fmt: skip
    paths = [repo / n for n in out.decode().split("\0") if n]
    total = sum(p.stat().st_size for p in paths if p.is_file())
    carry = repo / ".serve-carry"
    return total + sum(f.stat().st_size for f in carry.rglob("*") if f.is_file())


def pack(src: Path, dest: Path, leave_out: set[str]) -> int:
    """tar.xz of ``src`` without the top-level folders in ``leave_out``; returns its size."""
    tmp = dest.with_name(f".{dest.name}.part")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        for top in sorted(src.iterdir()):
            if top.name not in leave_out and not top.name.startswith(".restored"):
                tar.add(top, arcname=top.name)
    os.replace(tmp, dest)
    return dest.stat().st_size


def install(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` whole or not at all."""
    part = dest.with_name(f".{dest.name}.part")
    shutil.copyfile(src, part)
    os.replace(part, dest)


def keep(pack_file: Path, repo: Path, budget: int | None = None) -> str:
    """Install ``pack_file`` as ``repo/.serve-cache/serve-cache.tar.xz`` within ``budget`` bytes
    (default: what a call may carry beside the rest); returns what was done, in one line."""
    if budget is None:
        budget = CALL_LIMIT - MARGIN - travelling_bytes(repo)
    dest_dir = repo / ".serve-cache"
    dest_dir.mkdir(exist_ok=True)
    dest = dest_dir / "serve-cache.tar.xz"
    left_out: set[str] = set()
    size = pack_file.stat().st_size
    if size <= budget:  # as it came: no repacking
        with tarfile.open(pack_file) as tar:
            tar.getmembers()  # reads it whole: a cut-off pack fails here, before dest is touched
        install(pack_file, dest)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "cache"
            with tarfile.open(pack_file) as tar:
                tar.extractall(root, filter="data")
            trial = Path(tmp) / "trial.tar.xz"
            present = {p.name for p in root.iterdir() if p.is_dir()}
            size = pack(root, trial, left_out)
            for name in DROP_ORDER:
                if size <= budget:
                    break
                if name in present:
                    left_out.add(name)
                    size = pack(root, trial, left_out)
            if size > budget:  # the pack kept from an earlier call stays as it was
                raise SystemExit(
                    f"serve_cache: even without {sorted(left_out)} the pack is {size >> 10} KiB,"
                    f" over the {max(budget, 0) >> 10} KiB a call has left"
                )
            install(trial, dest)
    dropped = f", left out {sorted(left_out)}" if left_out else ""
    where = dest.relative_to(repo)
    return f"serve_cache: {where} {size >> 10} KiB (budget {budget >> 10} KiB){dropped}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("prune", help="on the box: drop Triton IR, say what the cache holds")
    sp.add_argument("dir", type=Path)
    sk = sub.add_parser("keep", help="here: install a returned pack as .serve-cache/")
    sk.add_argument("pack", type=Path)
    sk.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    args = p.parse_args(argv)
    try:
        if args.cmd == "prune":
            if not args.dir.is_dir():
                raise SystemExit(f"serve_cache: {args.dir} is not a folder")
            print(prune(args.dir))
        else:
            if not args.pack.is_file():
                raise SystemExit(f"serve_cache: {args.pack} is not a file")
            print(keep(args.pack, args.repo))
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise
    except subprocess.CalledProcessError:
        print(
            f"serve_cache: git ls-files failed in {args.repo}: not a git checkout?", file=sys.stderr
        )
        return 2
    except (OSError, EOFError, lzma.LZMAError, tarfile.TarError, json.JSONDecodeError) as exc:
        first = (str(exc).splitlines() or [""])[0]  # tarfile's own message runs to several lines
        print(f"serve_cache: {type(exc).__name__}: {first}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
