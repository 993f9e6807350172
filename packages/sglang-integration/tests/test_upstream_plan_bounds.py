"""``deepgemm-compat plan``'s bounds held to SGLang 0.5.23's own argument checks.

The reference is the installed SGLang resolving a GLM-5.1-FP8 node (``--tp 8``) on an emulated
SM90 and running its ``check_server_args``, the checks ``sglang serve`` runs before it launches;
the other side is the ``deepgemm-compat`` console script's ``main``. Each rule the command states
is asserted to be SGLang's:

* ``--chunked`` must be a multiple of 64: SGLang resolves GLM-5.1's page size to 64 and refuses a
  chunk size that is not a multiple of it; the fix the command names passes SGLang.
* ``--cp`` stops at 8: SGLang runs DSA prefill CP at 8 ranks on one node and refuses 9 and 16.
* only -1 means chunking off: SGLang's DeepGEMM warmup list reads 0 and -5 as off (the same list
  as -1), while its PD-multiplexing check reads them as on (refused like 8192, where -1 passes).
"""

from __future__ import annotations

import _sglang_env as env
import pytest
from deepgemm_compat.cli import main
from deepgemm_compat.warmup import upstream_m_list

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]


def sglang_checks(*argv: str):
    """SGLang's resolved arguments after ``check_server_args``; raises what SGLang raises."""
    from sglang_cpkv.serve._dry_run import emulated_gpu

    server_args = env.resolve(env.glm51_argv(*argv), env.SM90)
    with emulated_gpu(env.SM90):
        server_args.check_server_args()
    return server_args


def plan(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``deepgemm-compat plan argv``: exit code and stderr."""
    code = main(["plan", "--m-list", "copy", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("chunked", "fix"), [("10000", "10048"), ("100", "128")])
def test_chunk_sizes_off_the_page_are_refused_by_both(plugin, capsys, chunked, fix):
    with pytest.raises(AssertionError, match="chunked_prefill_size must be divisible by page_size"):
        sglang_checks("--chunked-prefill-size", chunked)
    code, err = plan("--chunked", chunked, capsys=capsys)
    assert code == 2 and "is not a multiple of 64" in err and f"fix: --chunked {fix}" in err
    assert env.resolved(sglang_checks("--chunked-prefill-size", fix), "page_size") == 64
    assert plan("--chunked", fix, capsys=capsys)[0] == 0


def test_cp_stops_at_one_node(plugin, capsys):
    cp8 = sglang_checks("--enable-prefill-cp", "--cp-strategy", "interleave")
    assert env.resolved(cp8, "attn_cp_size") == 8
    assert plan("--cp", "8", capsys=capsys)[0] == 0
    for tp, nodes in (("9", "1"), ("16", "2")):
        with pytest.raises(AssertionError, match=r"single machine \(tp_size <= 8\)"):
            sglang_checks("--tp", tp, "--nnodes", nodes, "--enable-prefill-cp", "--cp-strategy",
                          "interleave")  # fmt: skip
        code, err = plan("--cp", tp, capsys=capsys)
        assert code == 2 and "--cp must be <= 8" in err


@pytest.mark.parametrize("chunked", ["0", "-5"])
def test_only_minus_one_is_off_everywhere(plugin, capsys, chunked):
    n = int(chunked)
    for fast in (False, True):  # SGLang's DeepGEMM warmup: off, the same list as -1
        assert upstream_m_list(n, fast) == upstream_m_list(-1, fast)
    pdmux = ("--enable-pdmux", "--disable-overlap-schedule")
    for on in (chunked, "8192"):  # SGLang's PD-multiplexing check: on, like a real chunk size
        with pytest.raises(AssertionError, match="not compatible with chunked prefill"):
            sglang_checks("--chunked-prefill-size", on, *pdmux)
    sglang_checks("--chunked-prefill-size", "-1", *pdmux)
    code, err = plan("--chunked", chunked, capsys=capsys)
    assert code == 2 and "only -1 turns chunked prefill off" in err
    assert plan("--chunked", "-1", capsys=capsys)[0] == 0
