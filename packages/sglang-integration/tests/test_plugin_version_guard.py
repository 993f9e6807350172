"""The version guard: 0.5.20 <= sglang <= 0.5.23, else a refusal naming the range and the escape."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from sglang_cpkv import PluginRefused, UnsupportedSGLangError
from sglang_cpkv.errors import SharedKVError
from sglang_cpkv.plugin._releases import check_shared_kv_release
from sglang_cpkv.plugin._version_guard import (
    ALLOW_ENV,
    SUPPORTED_RANGE,
    check_sglang_version,
    installed_sglang_version,
    is_supported,
    parse_release,
)


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.5.20", True),
        ("0.5.21", True),
        ("0.5.23", True),
        ("0.5.23.post1", True),  # post releases of a tested release keep its hooks
        ("0.5.20rc0", True),
        ("0.5.19", False),
        ("0.5.24", False),
        ("0.5.24.dev3", False),
        ("0.6.0", False),
        ("0.4.10", False),
        ("1.0.0", False),
        ("not-a-version", False),
    ],
)
def test_supported_range(version, ok):
    assert is_supported(version) is ok


def test_parse_release():
    assert parse_release("0.5.23.post1+cu130") == (0, 5, 23)
    assert parse_release("v0.5.20") == (0, 5, 20)
    assert parse_release("dev") is None


@pytest.mark.parametrize(
    ("version", "refused"),
    [("0.5.21", True), ("v0.5.21", True), ("0.5.21rc1", True), ("0.5.20.post2", True),
     ("0.5.22", False), ("0.5.23.post1", False), ("dev", False)],
)  # fmt: skip
def test_shared_kv_release_is_read_as_the_guard_reads_it(version, refused):
    """``--cpkv-shared-kv``'s release check parses like the version guard: a ``v`` prefix or a
    pre-release part does not hide an older release (a string with no release is the guard's to
    refuse, not this check's)."""
    if refused:
        with pytest.raises(SharedKVError, match=f"the installed sglang is {version}"):
            check_shared_kv_release(version)
    else:
        check_shared_kv_release(version)


def _expected_sglang() -> str:
    """The sglang this run has: CI's range step names the release it put first on PYTHONPATH
    (``CPKV_EXPECT_SGLANG``); otherwise the workspace lock's pin."""
    if expected := os.environ.get("CPKV_EXPECT_SGLANG"):
        return expected
    root = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    (pin,) = [d for d in root["dependency-groups"]["dev"] if d.startswith("sglang==")]
    return pin.removeprefix("sglang==")


def test_installed_version_is_supported():
    assert installed_sglang_version() == _expected_sglang()
    assert check_sglang_version(env={}) == _expected_sglang()


def test_refusal_names_range_and_escape_hatch():
    with pytest.raises(UnsupportedSGLangError) as info:
        check_sglang_version("0.5.19", env={})
    msg = str(info.value)
    assert "sglang 0.5.19 is outside the supported range 0.5.20 <= sglang <= 0.5.23" in msg
    assert f"{ALLOW_ENV}=1" in msg
    assert "pip install 'sglang==0.5.23'" in msg


def test_escape_hatch_warns_and_continues(caplog):
    with caplog.at_level(logging.WARNING, logger="sglang_cpkv"):
        assert check_sglang_version("0.5.19", env={ALLOW_ENV: "1"}) == "0.5.19"
    assert SUPPORTED_RANGE in caplog.text and f"{ALLOW_ENV}=1" in caplog.text
    with pytest.raises(UnsupportedSGLangError):  # only "1" opens it
        check_sglang_version("0.5.19", env={ALLOW_ENV: "yes"})


def test_refusal_escapes_load_plugins_exception_handler():
    # load_plugins() wraps each plugin in `except Exception`; a refusal must not be swallowed.
    assert not issubclass(PluginRefused, Exception)
    assert issubclass(PluginRefused, SystemExit)


def _standin(tmp_path, version: str):
    """A directory whose sglang dist-info says ``version``, put first on sys.path."""
    dist = tmp_path / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    env = {k: v for k, v in os.environ.items() if k != ALLOW_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    return env


def test_standin_0_5_19_refused_by_entry_point(tmp_path):
    """The real entry point, found through the installed metadata as SGLang finds it."""
    env = _standin(tmp_path, "0.5.19")
    code = textwrap.dedent(
        """
        from importlib.metadata import entry_points
        (ep,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "cpkv"]
        ep.load()()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert "sglang-cpkv plugin refused to load" in proc.stderr
    assert "sglang 0.5.19 is outside the supported range 0.5.20 <= sglang <= 0.5.23" in proc.stderr
    assert f"{ALLOW_ENV}=1" in proc.stderr
