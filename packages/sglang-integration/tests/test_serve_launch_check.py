"""A real launch checks the resolved arguments on its GPU before SGLang's server starts.

``cpkv-serve`` without ``--dry-run`` used to hand the arguments straight to ``sglang serve``: an
argument SGLang's ``check_server_args()`` refuses, or a DSA backend the GPU cannot run, ended in
SGLang's traceback, exit 1. Now it resolves them with SGLang's code on the local GPU first
(``cli.launch_refusal``), so the refusal is one line and exit 2. (No GPU at all is refused before
SGLang is imported: ``test_serve_hostile.py``.)

Two test doubles, for what this machine has not got: the GPU is the emulated one of
``_dry_run.emulated_gpu`` (the capability query and SGLang's platform facts, as the dry run's
``--gpu``), and SGLang's server start, which needs that GPU, is replaced by a stand-in that
records the arguments it was handed instead of loading weights.
"""

from __future__ import annotations

import logging

import _sglang_env as env
import pytest
from cpkv_cli import InputError
from sglang_cpkv.plugin import _decisions
from sglang_cpkv.serve import cli
from sglang_cpkv.serve._dry_run import emulated_gpu
from sglang_cpkv.serve._resolve_check import resolve_checked

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

NODE = [*env.glm51_argv(), "--device", "cuda"]


@pytest.fixture
def sglang_server(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Stand-in for SGLang's server start (it needs a GPU): the argv lists it was handed."""
    import sglang.cli.serve

    started: list[list[str]] = []
    monkeypatch.setattr(sglang.cli.serve, "serve", lambda _args, argv: started.append(argv))
    return started


def _launch(capsys, capability: tuple[int, int], *argv: str) -> tuple[int, str]:
    with emulated_gpu(capability):
        code = cli.serve([*NODE, *argv])
    return code, capsys.readouterr().err


def _refusal(err: str) -> str:
    lines = [ln for ln in err.splitlines() if not ln.startswith("cpkv[hooks]: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_the_plugins_refusal_of_the_gpu_comes_before_sglang_starts(capsys, sglang_server):
    code, err = _launch(capsys, env.SM90, "--dsa-prefill-backend", "trtllm")
    assert code == 2 and sglang_server == []
    assert _refusal(err).startswith(
        "cpkv-serve: error: --dsa-prefill-backend is trtllm (you set it) but this GPU is SM90; "
    )


def test_sglangs_check_server_args_refuses_before_sglang_starts(capsys, sglang_server):
    code, err = _launch(capsys, env.SM100, "--chunked-prefill-size", "100")
    assert code == 2 and sglang_server == []
    assert _refusal(err) == (
        "cpkv-serve: error: SGLang refused these arguments: AssertionError: "
        "chunked_prefill_size must be divisible by page_size"
    )


def test_arguments_that_pass_go_to_sglang_as_given(capsys, sglang_server):
    """The check resolves quietly and leaves no trace: SGLang gets the user's argv (no added
    ``--log-level``), the root logger as it was, and no decision marked as already logged."""
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    schedule = ["--json-model-override-args", '{"index_topk_freq": 4}']  # --cpkv-index-topk-freq
    code, err = _launch(capsys, env.SM100, *schedule)
    assert code == 0 and sglang_server == [[*NODE, *schedule]]
    assert (root.level, root.handlers) == (level, handlers)
    assert _decisions.decisions() == []
    assert "Setting page size" not in err  # the check's resolution logged nothing


def test_another_serve_backend_is_sglangs_alone(capsys, sglang_server):
    code, _ = _launch(capsys, env.SM90, "--model-type", "diffusion", "--chunked-prefill-size", "1")
    assert code == 0 and len(sglang_server) == 1


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (12, 0)], ids=["sm80", "sm89", "sm120"])
def test_flashmla_backends_are_refused_off_hopper_and_blackwell(capability):
    """SGLang 0.5.23 resolves FlashMLA's DSA backends on any CUDA GPU (on SM80: prefill
    flashmla_sparse); FlashMLA has kernels for SM90 and SM100 only. SM120 gets
    flashinfer_sparse_mla from SGLang, which passes; asked for FlashMLA there, it is refused."""
    argv = [*NODE, "--dsa-prefill-backend", "flashmla_sparse", "--kv-cache-dtype", "bfloat16"]
    major, minor = capability
    with pytest.raises(InputError) as refused:
        resolve_checked(argv, capability)
    assert str(refused.value).startswith(
        f"this GPU is SM{major}{minor}, but the DSA prefill backend resolves to flashmla_sparse, "
        "whose FlashMLA kernels run on SM90 (Hopper) and SM100 (Blackwell) only. Fix: "
    )
    for fits in (env.SM90, env.SM100):
        resolve_checked(argv, fits)


def test_only_the_side_a_pd_node_runs_counts():
    """A PD decode node never runs the prefill backend: SM120's flashinfer_sparse_mla decode
    passes beside a FlashMLA prefill it would not run."""
    prefill = ["--dsa-prefill-backend", "flashmla_sparse"]
    resolve_checked([*NODE, "--disaggregation-mode", "decode", *prefill], (12, 0))
    with pytest.raises(InputError, match="the DSA prefill backend resolves to flashmla_sparse"):
        resolve_checked([*NODE, "--disaggregation-mode", "prefill", *prefill], (12, 0))
