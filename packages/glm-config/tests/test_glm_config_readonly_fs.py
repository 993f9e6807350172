"""``glm-config set`` on a read-only filesystem names the filesystem, not the file's mode.

The model directory is bind-mounted read-only onto itself inside a private mount namespace
(``unshare -m``: the mount ends with the command and no other process sees it); the installed
console script runs there. Before, a root user read "is read-only (mode 0644, ...): make it
writable (chmod u+w), or pass --force", and neither helps on a read-only filesystem (EROFS).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _glmcfg_fixtures import write_model
from hostile_cli import tree

GLM_CONFIG = Path(sys.executable).parent / "glm-config"


def _read_only_run(directory: Path, *argv: str) -> subprocess.CompletedProcess:
    d = shlex.quote(str(directory))
    script = (
        f"mount --bind {d} {d} && mount -o remount,ro,bind {d} {d} || exit 99; "
        f"exec {shlex.quote(str(GLM_CONFIG))} {' '.join(map(shlex.quote, argv))}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, check=False
    )
    if proc.returncode == 99 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount read-only here (needs root in a mount namespace): {proc.stderr}")
    print(proc.stdout, proc.stderr)
    return proc


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_read_only_filesystem_is_named(tmp_path, force):
    d = write_model(tmp_path, "glm5_freq4")
    before = tree(d)
    argv = ["set", str(d), "index_topk_freq=2", *(["--force"] if force else [])]
    proc = _read_only_run(d, *argv)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        f"glm-config: error: {d / 'config.json'} is on a read-only filesystem, {d} ("
    )
    assert "(EROFS)" in proc.stderr and "remount it read-write" in proc.stderr
    assert "chmod" not in proc.stderr and "mode 0" not in proc.stderr
    assert tree(d) == before


def test_show_still_reads_a_read_only_filesystem(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    proc = _read_only_run(d, "show", str(d), "--format", "json")
    assert proc.returncode == 0 and '"index_topk_freq"' in proc.stdout
