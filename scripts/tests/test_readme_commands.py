"""The README's two commands: the main one installs only what it runs, and it runs there; the
test command compiles bytecode as CI needs; both put uv on PATH on a stock Python, PEP 668 included.

The main command's environment is built as the README's command builds it (``uv sync --frozen
--no-default-groups --package cpkv-validate``, into a scratch environment from uv's cache, hard
links) and one scenario runs in it. That run found ``numpy`` missing: torch.distributed's
``all_gather_object`` needs it and torch does not depend on it; the dev workspace had hidden it.

Their shared start (``. scripts/ensure-uv``) runs on a copy of this interpreter whose stdlib
folder holds ``EXTERNALLY-MANAGED``, so its pip refuses system-wide installs as Debian 12's does
(the old start, ``python3 -m pip install -q uv``, failed there), with uv absent from PATH and with
uv present. Offline: pip installs uv from a wheel built here around the uv binary running the
tests (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block(marker: str) -> str:
    text = README.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
    return text.replace("```", "").strip()


def test_the_test_command_compiles_bytecode_as_ci_runs_it():
    command = _block("test-command")
    assert "uv sync --frozen --compile-bytecode" in command and command.endswith("scripts/test-all")
    assert "uv sync" not in (ROOT / ".ci" / "run").read_text().split("test_cmd=")[0].replace(
        "`uv sync --frozen --compile-bytecode`", ""
    )  # CI's only sync is the README's


@pytest.mark.slow
def test_the_main_command_installs_only_what_it_runs_and_runs(tmp_path: Path):
    command = _block("main-command")
    uv_args = re.search(r"uv run (.*) cpkv-validate$", command)
    assert uv_args, command
    flags = uv_args.group(1).split()
    assert flags == ["--frozen", "--no-default-groups", "--package", "cpkv-validate"]
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is not on PATH"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")}
    env.pop("VIRTUAL_ENV", None)
    sync = [uv, "sync", "--offline", "--quiet", *flags]
    subprocess.run(sync, cwd=ROOT, env=env, check=True, timeout=600)
    py = tmp_path / "venv" / "bin" / "python"
    names = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m; print(*{d.metadata['Name'].lower() "
         "for d in m.distributions()})"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert {"cpkv-validate", "cpkv-runtime", "indexcache", "torch", "rich", "numpy"} <= set(names)
    assert not {"sglang", "transformers", "pytest", "ruff", "cpkv-kernels"} & set(names)
    stated = re.search(r"(\d+) distributions", README)
    assert stated and int(stated.group(1)) == len(names), (len(names), sorted(names))
    run = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "cpkv-validate"), "--cp", "2", "--split", "zigzag",
         "--allocator", "sglang", "--scenario", "tiny_extends", "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: " in run.stdout


def _uv_start() -> str:
    """What both commands run before their first ``uv`` command."""
    starts = {_block(m).split(" && uv ")[0] for m in ("main-command", "test-command")}
    assert len(starts) == 1, starts
    return starts.pop()


def _uv_binary() -> Path:
    """The uv binary running these tests (``uv run`` sets ``UV``), not a shim that needs more."""
    found = os.environ.get("UV") or shutil.which("uv")
    assert found, "uv is not on PATH"
    path = Path(found).resolve()
    assert path.read_bytes()[:4] == b"\x7fELF", f"{path} is not the uv binary (a shim?); set UV"
    return path


def _uv_wheel(uv: Path, folder: Path) -> Path:
    """A wheel named uv holding ``uv`` as a script, as PyPI's uv wheels do: pip installs it into
    ``bin/`` without a network."""
    version = subprocess.run(
        [str(uv), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    info = f"uv-{version}.dist-info"
    files = {
        f"uv-{version}.data/scripts/uv": uv.read_bytes(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }
    record = f"{info}/RECORD"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"uv-{version}-py3-none-any.whl"
    lines = []
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            entry = zipfile.ZipInfo(name)
            entry.external_attr = (stat.S_IFREG | (0o755 if name.endswith("/uv") else 0o644)) << 16
            zf.writestr(entry, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{name},sha256={digest},{len(data)}")
        zf.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def pep668_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bin/`` of a copy of this interpreter (its binary, the stdlib linked file by file, pip
    from ensurepip's bundled wheel) whose stdlib folder holds ``EXTERNALLY-MANAGED``."""
    root = tmp_path_factory.mktemp("pep668-python")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    lib = root / "lib" / stdlib.name
    (lib / "site-packages").mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "site-packages":
            (lib / entry.name).symlink_to(entry)
    (root / "bin").mkdir()
    python = root / "bin" / "python3"
    shutil.copy2(Path(sys._base_executable).resolve(), python)  # a link would find the original
    clean = {"PATH": str(root / "bin"), "HOME": str(root)}
    subprocess.run([str(python), "-m", "ensurepip"], env=clean, check=True, capture_output=True)
    (lib / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=this Python is managed by its distribution (test copy)\n"
    )
    prefix = subprocess.run(
        [str(python), "-c", "import sys; print(sys.prefix)"],
        env=clean, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(prefix) == root, prefix
    return root / "bin"


def _shell(command: str, path: Path, home: Path, wheels: Path) -> subprocess.CompletedProcess:
    """``command`` in bash at the clone's root, with nothing on PATH but ``path``, offline pip."""
    env = {
        "PATH": str(path), "HOME": str(home), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
        "PIP_CONFIG_FILE": os.devnull,
    }  # fmt: skip
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_uv_absent_on_a_pep668_python_is_installed_and_put_on_path(
    pep668_python: Path, tmp_path: Path
):
    wheels = tmp_path / "wheels"
    _uv_wheel(_uv_binary(), wheels)
    refused = _shell("python3 -m pip install -q uv", pep668_python, tmp_path / "h0", wheels)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    start, home = _uv_start(), tmp_path / "home"
    first = _shell(f"{start} && uv --version && command -v uv", pep668_python, home, wheels)
    assert first.returncode == 0, first.stdout + first.stderr
    version, where = first.stdout.splitlines()
    assert version.startswith("uv ") and Path(where).is_relative_to(home), first.stdout
    assert first.stderr.startswith("ensure-uv: uv is not on PATH; installing it"), first.stderr
    assert len(first.stderr.splitlines()) == 1, first.stderr
    assert not list((pep668_python.parent / "lib").glob("*/site-packages/uv*"))  # not system-wide
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    again = _shell(f"{start} && uv --version", pep668_python, home, empty)  # pip would fail
    assert again.returncode == 0 and again.stderr == "", again.stdout + again.stderr


def test_uv_present_runs_neither_python_nor_pip(tmp_path: Path):
    only_uv = tmp_path / "bin"
    only_uv.mkdir()
    (only_uv / "uv").symlink_to(_uv_binary())
    run = _shell(f"{_uv_start()} && uv --version", only_uv, tmp_path / "home", tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("uv "), run.stdout + run.stderr
    assert run.stderr == ""
    assert not (tmp_path / "home").exists()
