"""The GPU serve suite's server arguments pass ``cpkv-serve --dry-run`` here, on the tiny
checkpoint it serves: SGLang's own resolution and ``check_server_args`` (0.5.23 on this machine)
approve each configuration before a device call is spent on it. A CP size above 1 once lacked
``--cp-strategy``, which SGLang refuses at launch."""

from __future__ import annotations

import sys
from pathlib import Path

import _sglang_env as env
import pytest
from sglang_cpkv.serve.cli import main

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import serve_suite  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from glm_config import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    ("cp", "config"), [(1, "bf16"), (1, "eagle"), (1, "fp8"), (2, "bf16"), (2, "indexcache-f4")]
)
def test_the_suites_arguments_pass_the_dry_run(tiny, cp, config, capsys):
    extra, _, _ = serve_suite.CONFIGS[config]
    argv = [*serve_suite.base_args(tiny, cp, cp, dummy=False), *extra]
    code = main([*argv, "--dry-run", "--gpu", "sm90"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "cpkv-serve --dry-run: GlmMoeDsaForCausalLM" in out
