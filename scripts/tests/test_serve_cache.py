"""``scripts/serve/serve_cache.py``: Triton cache groups stay cache hits after pruning, and a pack
returned from the box is kept within what one call may carry.

The groups are written and read back by Triton's own ``FileCacheManager`` (the class its
``compile()`` uses for the lookup), so "still a hit" is Triton's answer, not ours. A cubin cannot
be built here (no GPU); the group's files stand in with their real names and roles, which is all
the lookup reads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "serve_cache.py"
spec = importlib.util.spec_from_file_location("serve_cache", SCRIPT)
serve_cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_cache)

triton_cache = pytest.importorskip("triton.runtime.cache")

STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin", "source")


def write_group(key: str, kernel: str) -> dict[str, str]:
    """One kernel's cache group as Triton's compile() leaves it: each stage and the metadata."""
    mgr = triton_cache.FileCacheManager(key)
    group = {}
    for ext in STAGES:
        data = os.urandom(64) if ext == "cubin" else f"// {kernel} {ext}\n"
        group[f"{kernel}.{ext}"] = mgr.put(data, f"{kernel}.{ext}", binary=ext == "cubin")
    group[f"{kernel}.json"] = mgr.put(json.dumps({"name": kernel}), f"{kernel}.json", binary=False)
    mgr.put_group(f"{kernel}.json", group)
    return group


@pytest.fixture
def triton_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache" / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(d))
    write_group("a" * 20, "alloc_extend_kernel")
    write_group("b" * 20, "compute_position_kernel")
    return d


def lookup(key: str, kernel: str) -> dict | None:
    return triton_cache.FileCacheManager(key).get_group(f"{kernel}.json")


def test_a_pruned_group_is_still_a_hit_with_only_metadata_and_cubin(triton_dir):
    before = lookup("a" * 20, "alloc_extend_kernel")
    assert before is not None and len(before) == len(STAGES) + 1
    groups, freed = serve_cache.prune_triton_ir(triton_dir)
    assert groups == 2 and freed > 0
    after = lookup("a" * 20, "alloc_extend_kernel")
    assert after is not None, "Triton no longer finds the kernel: a miss, it would compile again"
    assert sorted(after) == ["alloc_extend_kernel.cubin", "alloc_extend_kernel.json"]
    assert (
        Path(after["alloc_extend_kernel.cubin"]).read_bytes()
        == Path(before["alloc_extend_kernel.cubin"]).read_bytes()
    )
    for name in set(before) - set(after):
        assert not Path(before[name]).exists()


def test_pruning_twice_changes_nothing_more(triton_dir):
    serve_cache.prune_triton_ir(triton_dir)
    assert serve_cache.prune_triton_ir(triton_dir) == (2, 0)
    assert lookup("b" * 20, "compute_position_kernel") is not None


def test_mutation_deleting_ir_without_rewriting_the_group_is_a_miss(triton_dir):
    """The planted bug the rewrite exists for: Triton treats the group as gone."""
    for f in triton_dir.rglob("*"):
        if f.suffix in serve_cache.IR_SUFFIXES:
            f.unlink()
    assert lookup("a" * 20, "alloc_extend_kernel") is None


def test_prune_report_names_the_kernels_and_subsystems(triton_dir):
    (triton_dir.parent / "deep_gemm").mkdir()
    (triton_dir.parent / "deep_gemm" / "k.cubin").write_bytes(b"x" * 2048)
    report = serve_cache.prune(triton_dir.parent)
    assert "2 Triton kernel groups" in report.splitlines()[0]
    assert "  deep_gemm: 1 files, 2 KiB" in report
    assert report.splitlines()[-1] == (
        "  Triton kernels: alloc_extend_kernel, compute_position_kernel"
    )


def make_pack(tmp_path: Path, sizes: dict[str, int]) -> Path:
    """A returned pack whose subsystems hold ``sizes`` bytes of incompressible data."""
    src = tmp_path / "box-cache"
    for name, size in sizes.items():
        (src / name).mkdir(parents=True)
        (src / name / "blob").write_bytes(os.urandom(size))
    pack = tmp_path / "serve-cache.tar.xz"
    with tarfile.open(pack, "w:xz") as tar:
        for top in src.iterdir():
            tar.add(top, arcname=top.name)
    return pack


def members(pack: Path) -> set[str]:
    with tarfile.open(pack) as tar:
        return {m.name.split("/")[0] for m in tar.getmembers()}


def test_keep_installs_the_pack_whole_when_it_fits(tmp_path):
    pack = make_pack(tmp_path, {"triton": 4096, "nv": 4096})
    repo = tmp_path / "repo"
    repo.mkdir()
    line = serve_cache.keep(pack, repo, budget=1 << 20)
    kept = repo / ".serve-cache" / "serve-cache.tar.xz"
    assert members(kept) == {"triton", "nv"} and "left out" not in line


def test_keep_drops_the_least_useful_subsystems_first(tmp_path):
    pack = make_pack(
        tmp_path, {"triton": 60_000, "deep_gemm": 30_000, "nv": 200_000, "inductor": 100_000}
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    line = serve_cache.keep(pack, repo, budget=120_000)
    assert members(repo / ".serve-cache" / "serve-cache.tar.xz") == {"triton", "deep_gemm"}
    assert "left out ['inductor', 'nv']" in line


def test_keep_refuses_when_even_triton_alone_does_not_fit_and_keeps_the_earlier_pack(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    earlier = make_pack(tmp_path / "earlier", {"triton": 1000})
    serve_cache.keep(earlier, repo, budget=1 << 20)
    kept = repo / ".serve-cache" / "serve-cache.tar.xz"
    before = kept.read_bytes()
    pack = make_pack(tmp_path, {"triton": 100_000})
    with pytest.raises(SystemExit, match="over the 48 KiB a call has left"):
        serve_cache.keep(pack, repo, budget=48 << 10)
    assert kept.read_bytes() == before


def test_a_cut_off_pack_is_one_line_and_leaves_the_earlier_pack(tmp_path, capsys):
    """What a call stopped mid-xz brings back."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    earlier = make_pack(tmp_path / "earlier", {"triton": 1000})
    serve_cache.keep(earlier, repo, budget=1 << 20)
    kept = repo / ".serve-cache" / "serve-cache.tar.xz"
    before = kept.read_bytes()
    whole = make_pack(tmp_path, {"triton": 50_000})
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert serve_cache.main(["keep", str(cut), "--repo", str(repo)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("serve_cache: ")
    assert kept.read_bytes() == before


def test_pruning_a_copied_cache_leaves_the_original_alone(triton_dir, tmp_path):
    """The groups record absolute paths; pruning the copy must touch only the copy."""
    import shutil

    copy = tmp_path / "copy" / "triton"
    shutil.copytree(triton_dir, copy)
    serve_cache.prune_triton_ir(copy)
    assert lookup("a" * 20, "alloc_extend_kernel") is not None
    assert len(lookup("a" * 20, "alloc_extend_kernel")) == len(STAGES) + 1
    assert not list(copy.rglob("*.ptx"))


def test_travelling_bytes_counts_what_a_call_sends(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("/.serve-carry/\n/ignored\n")
    (repo / "tracked").write_bytes(b"t" * 1000)
    subprocess.run(["git", "add", "tracked", ".gitignore"], cwd=repo, check=True)
    (repo / "untracked").write_bytes(b"u" * 300)
    (repo / "ignored").write_bytes(b"i" * 5000)
    (repo / ".serve-carry" / "wheels").mkdir(parents=True)
    (repo / ".serve-carry" / "wheels" / "w.whl").write_bytes(b"w" * 700)
    gitignore = len((repo / ".gitignore").read_bytes())
    assert serve_cache.travelling_bytes(repo) == 1000 + 300 + 700 + gitignore


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert serve_cache.main(["prune", str(tmp_path / "nope")]) == 2
    assert serve_cache.main(["keep", str(tmp_path / "nope.tar.xz")]) == 2
    bad = tmp_path / "bad.tar.xz"
    bad.write_bytes(b"not a tar")
    assert serve_cache.main(["keep", str(bad), "--repo", str(tmp_path)]) == 2  # no git checkout
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert serve_cache.main(["keep", str(bad), "--repo", str(tmp_path)]) == 2  # no tar
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("serve_cache: ") for line in err)
    assert "not a git checkout" in err[2] and "ReadError" in err[3]


def test_every_cache_sglang_resolves_from_the_suites_environment_is_in_the_pack(tmp_path):
    """``gpu-suite``'s serve environment, read from the script, resolved by SGLang 0.5.23 itself:
    its JIT kernels' root (``cache_root``) and the third-party caches it redirects lie inside the
    folder that is packed. Before, the JIT root was left at its default, outside it, and a fresh
    box rebuilt those kernels on its first request. (The box runs 0.5.20, which reads the same
    two variables.)"""
    import re
    import sys

    suite = (SCRIPT.parents[1] / "gpu-suite").read_text()
    pairs = dict(re.findall(r"\b(SGLANG_(?:JIT_)?CACHE_DIR)=(\S+?)[\s\"]", suite))
    assert set(pairs) == {"SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR"}, pairs
    folder = tmp_path / "serve-cache"
    env = {k: v.replace("$SERVE_CACHE", str(folder)) for k, v in pairs.items()}
    code = (
        "from sglang.kernels.jit.utils.compile.cache import cache_root\n"
        "from sglang.srt.environ import third_party_cache_defaults\n"
        "print(cache_root()); [print(v) for v in third_party_cache_defaults().values()]"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    roots = [Path(line) for line in out.stdout.split()]
    assert roots and all(r == folder or folder in r.parents for r in roots), roots
    # mutation: SGLang's own default for the JIT root is outside the packed folder
    bare = {**os.environ, "SGLANG_CACHE_DIR": str(folder)}
    bare.pop("SGLANG_JIT_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=bare, capture_output=True, text=True)
    assert folder not in Path(out.stdout.split()[0]).parents
