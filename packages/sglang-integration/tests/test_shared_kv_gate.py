"""The shared-KV gate and capacity report through ``cpkv-serve --cpkv-shared-kv --dry-run``.

SGLang 0.5.23 resolves each deployment (GPU emulated, as ``--dry-run --gpu`` does) with the
plugin's shared-KV hooks applied, in one fresh process (``_skv_dry_run_driver.py``): the gate
runs inside SGLang's own ``handle_kv_cache_sharding``. Expected verdicts are the table of
``docs/shared-kv.md``, written out here by hand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import _sglang_env as env
import pytest
from sglang_cpkv.plugin.shared_kv import backend_verdict

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

BASE = [
    "--model-path", str(env.GLM51_DIR), "--tp", "8", "--enable-prefill-cp", "--attn-cp-size", "8",
    "--cp-strategy", "interleave", "--disaggregation-mode", "prefill",
    "--disaggregation-transfer-backend", "mooncake", "--chunked-prefill-size", "65536",
]  # fmt: skip
DECODE = {"fp8_e4m3": "flashmla_kv", "bfloat16": "flashmla_sparse"}

# (prefill backend, KV dtype, gpu) -> works?  (docs/shared-kv.md, with the RAGGED-offset hook off)
TABLE = {
    ("flashmla_kv", "fp8_e4m3", "sm90"): True,
    ("flashmla_kv", "fp8_e4m3", "sm100"): True,
    ("flashmla_kv", "bfloat16", "sm90"): False,
    ("flashmla_kv", "bfloat16", "sm100"): False,
    ("flashmla_sparse", "bfloat16", "sm90"): True,
    ("flashmla_sparse", "bfloat16", "sm100"): True,
    ("flashmla_sparse", "fp8_e4m3", "sm90"): False,
    ("flashmla_sparse", "fp8_e4m3", "sm100"): False,
    ("triton_sparse_mla", "bfloat16", "sm90"): True,
    ("triton_sparse_mla", "bfloat16", "sm100"): True,
    ("triton_sparse_mla", "fp8_e4m3", "sm90"): False,
    ("triton_sparse_mla", "fp8_e4m3", "sm100"): False,
    ("flashmla_auto", "bfloat16", "sm90"): True,
    ("flashmla_auto", "bfloat16", "sm100"): True,
    ("flashmla_auto", "fp8_e4m3", "sm90"): True,
    ("flashmla_auto", "fp8_e4m3", "sm100"): False,
    ("trtllm", "fp8_e4m3", "sm100"): True,
}
OTHER = {
    # name: (extra argv, gpu, text the refusal must contain)
    "nixl": (["--disaggregation-transfer-backend", "nixl", "--dsa-prefill-backend", "flashmla_kv",
              "--kv-cache-dtype", "fp8_e4m3"], "sm90", "only Mooncake's sender"),
    "tbo": (["--enable-two-batch-overlap", "--dsa-prefill-backend", "flashmla_kv",
             "--kv-cache-dtype", "fp8_e4m3"], "sm90", "two-batch-overlap"),
    "zigzag": (["--cp-strategy", "zigzag", "--dsa-prefill-backend", "flashmla_kv",
                "--kv-cache-dtype", "fp8_e4m3"], "sm90", "cp-strategy"),
    "no_pd": (["--disaggregation-mode", "null", "--dsa-prefill-backend", "flashmla_kv",
               "--kv-cache-dtype", "fp8_e4m3"], "sm90", "PD prefill workers"),
}  # fmt: skip


def _doc_commands() -> dict[str, list[str]]:
    """The shared-KV commands of docs/deploy.md (```shell blocks), model path -> fixture."""
    doc = (Path(__file__).parents[1] / "docs" / "deploy.md").read_text()
    out = {}
    for block in re.findall(r"```shell\n(.*?)```", doc, flags=re.S):
        title, _, body = block.partition("\n")
        argv = shlex.split(body.replace("\\\n", " "))
        if argv and argv[0] == "cpkv-serve":
            argv = [str(env.GLM51_DIR) if a == "zai-org/GLM-5.1-FP8" else a for a in argv[1:]]
            out[title.lstrip("# ").strip()] = [a for a in argv if a != "--cpkv-shared-kv"]
    return out


DOC = _doc_commands()


def _case(backend: str, dtype: str, gpu: str) -> dict:
    argv = [*BASE, "--dsa-prefill-backend", backend, "--kv-cache-dtype", dtype]
    decode = "trtllm" if backend == "trtllm" else DECODE[dtype]
    return {"name": f"{backend}/{dtype}/{gpu}", "gpu": gpu,
            "argv": [*argv, "--dsa-decode-backend", decode]}  # fmt: skip


def _run_driver(tmp: Path, cases: list[dict], disable: str) -> dict:
    """Every case through the dry-run driver in one fresh process, with ``disable`` hooks off."""
    (tmp / "cases.json").write_text(json.dumps(cases))
    env_vars = {**os.environ, "HF_HUB_OFFLINE": "1", "CPKV_DISABLE_HOOKS": disable}
    env_vars.pop("CPKV_SHARED_KV", None)
    driver = Path(__file__).parent / "_skv_dry_run_driver.py"
    proc = subprocess.run(
        [sys.executable, str(driver), str(tmp / "cases.json"), str(tmp / "out.json")],
        env=env_vars, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert (tmp / "out.json").exists(), proc.stderr[-4000:]
    return json.loads((tmp / "out.json").read_text())


# the combinations only the RAGGED-offset fix admits
def _sm(gpu: str) -> int:
    return 9 if gpu == "sm90" else 10


FIX_ADMITS = [
    k for k, works in TABLE.items()
    if not works and backend_verdict(k[0], k[1], _sm(k[2]), ragged_fixed=True).works
]  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """The table's deployments with the RAGGED-offset hook off, plus the other cases."""
    tmp = tmp_path_factory.mktemp("gate")
    cases = [_case(*k) for k in TABLE]
    cases += [{"name": k, "gpu": g, "argv": [*BASE, *a]} for k, (a, g, _) in OTHER.items()]
    cases.append(
        {"name": "capacity", "gpu": "sm90",
         "argv": [*BASE, "--dsa-prefill-backend", "flashmla_kv", "--kv-cache-dtype", "fp8_e4m3",
                  "--cpkv-scratch-batch", "8x65536+2048", "--max-running-requests", "64"]}
    )  # fmt: skip
    cases += [
        {"name": title, "gpu": "sm100" if "SM100" in title else "sm90", "argv": argv}
        for title, argv in DOC.items()
    ]
    return _run_driver(tmp, cases, disable="ragged-offsets")


@pytest.fixture(scope="module")
def results_fixed(tmp_path_factory) -> dict:
    """The combinations the RAGGED-offset fix admits, with every default hook on."""
    return _run_driver(tmp_path_factory.mktemp("gate-fixed"), [_case(*k) for k in FIX_ADMITS], "")


@pytest.mark.parametrize(("backend", "dtype", "gpu"), list(TABLE))
def test_gate_table(results, backend, dtype, gpu):
    r = results[f"{backend}/{dtype}/{gpu}"]
    works = TABLE[(backend, dtype, gpu)]
    assert (r["code"] == 0) == works, r["stderr"]
    if works:
        why = r["report"]["shared_kv"]["backends"]["why"]
        assert why and backend in why[0]["message"]
        assert r["report"]["resolved"]["dsa_prefill_backend"] == backend
    else:
        assert f"--dsa-prefill-backend {backend}" in r["stderr"]
        assert "--cpkv-shared-kv cannot serve this deployment" in r["stderr"]


@pytest.mark.parametrize(("backend", "dtype", "gpu"), list(TABLE))
def test_gate_function_agrees(backend, dtype, gpu):
    major = 9 if gpu == "sm90" else 10
    assert (
        backend_verdict(backend, dtype, major, ragged_fixed=False).works
        == TABLE[(backend, dtype, gpu)]
    )


def test_ragged_fix_admits_the_ragged_combinations():
    assert sorted(FIX_ADMITS) == sorted(k for k in TABLE if k[1] == "fp8_e4m3" and not TABLE[k])


# Why the fix admits each (docs/shared-kv.md, "RAGGED:" under the gate table), by hand: with a
# prefix the RAGGED top-k dequantises the scratch through the per-request flattened table;
# flashmla_auto on SM100 picks flashmla_sparse where KV tokens < 512 x query tokens.
RAGGED_FIXED_WHY = {
    "flashmla_sparse": ("RAGGED top-k", "per-request flattened table"),
    "triton_sparse_mla": ("RAGGED top-k", "per-request flattened table"),
    "flashmla_auto": ("flashmla_sparse where", "RAGGED offsets fixed"),
}


@pytest.mark.parametrize(("backend", "dtype", "gpu"), FIX_ADMITS)
def test_gate_with_the_ragged_fix_on(results_fixed, backend, dtype, gpu):
    """With the hook registered (the default) SGLang's resolver admits what the fix repairs,
    keeps the requested prefill backend, and the report says why in the doc's words."""
    r = results_fixed[f"{backend}/{dtype}/{gpu}"]
    assert r["code"] == 0, r["stderr"]
    assert r["report"]["resolved"]["dsa_prefill_backend"] == backend
    why = r["report"]["shared_kv"]["backends"]["why"]
    assert [d["message"] for d in why] == [
        f"prefill {backend} with {dtype} KV on SM{_sm(gpu)}0 over the per-request scratch"
    ]
    assert all(text in why[0]["reason"] for text in RAGGED_FIXED_WHY[backend]), why


@pytest.mark.parametrize("name", list(OTHER))
def test_other_refusals_keep_their_reason(results, name):
    r = results[name]
    assert r["code"] == 2, r["stderr"]
    assert OTHER[name][2] in r["stderr"], r["stderr"]


def test_capacity_report(results):
    r = results["capacity"]
    assert r["code"] == 0, r["stderr"]
    s = r["report"]["shared_kv"]
    # 656 B packed fp8 latent + 132 B indexer per token; 8 x 202,752-token contexts rounded to
    # the 8 x 64 gather span, plus the 65,536-token chunk and one trash page, two slots
    assert s["scratch"]["row_bytes"] == 656 + 132
    assert s["scratch"]["max_prefix_tokens"] == 8 * 202752
    assert s["scratch"]["bytes_both_slots"] == 2 * (8 * 202752 + 65536 + 64) * 788
    dedup, no_dedup, sglang = (s["batch_scratch"][k] for k in ("dedup", "no_dedup", "sglang"))
    assert dedup["unique_pages"] == 1024 and dedup["gathered_pages"] == 1024
    assert no_dedup["gathered_pages"] == sglang["gathered_pages"] == 8 * 1024
    assert sglang["unique_pages"] == 1024
    assert dedup["write_pages"] == 8 * 32
    assert s["backends"]["prefill"] == "flashmla_kv"
    assert "(request, page)" in s["layout"]
    # the plan's (requests, logical pages) int32 inverse, bounded by SGLang's admission limit;
    # the fixture has no weights index, so the figure is per GiB of KV budget
    inv = s["inverse"]
    rows_per_gib = (1 << 30) // s["token_bytes_all_layers"]
    assert inv["per_gib_of_budget"] and inv["requests"] == 64
    assert inv["logical_pages"] == 8 * (rows_per_gib // 64 + 1)
    assert inv["bytes"] == 64 * inv["logical_pages"] * 4


def test_deploy_doc_commands_resolve(results):
    assert set(DOC) == {"prefill node, SM90, shared KV", "prefill node, SM100, shared KV"}
    for title in DOC:
        r = results[title]
        assert r["code"] == 0, (title, r["stderr"])
        assert r["report"]["shared_kv"]["batch_scratch"]["dedup"]["fits"]


def test_stated_reasons_match_sglang():
    """The gate's reasons state SGLang's rules: flashmla_auto picks flashmla_sparse by
    ``seq_lens_sum < extend_num_tokens * 512`` (``set_dsa_prefill_impl``), not for exactly the
    no-prefix batches; the prefill node runs only EAGLE's draft extend on the decode backend."""
    from sglang_cpkv.plugin.shared_kv._gate import GateInput, gate_refusals

    auto = backend_verdict("flashmla_auto", "fp8_e4m3", 10, ragged_fixed=False).reason
    assert "fewer than 512 x its query tokens" in auto and "every batch without a prefix" in auto
    fixed = backend_verdict("flashmla_auto", "fp8_e4m3", 10, ragged_fixed=True).reason
    assert "KV tokens < 512 x its query tokens" in fixed
    g = GateInput("cuda", True, 8, "interleave", 1, "flashmla_kv", "triton_sparse_mla",
                  "fp8_e4m3", 64, "mooncake", False, 1, False, 9)  # fmt: skip
    (line,), _ = gate_refusals(g, ragged_fixed=False)
    assert "draft extend after each prefill" in line and "draft steps" not in line, line


def test_stated_auto_rule_is_sglangs():
    """The factor the gate states for ``flashmla_auto`` is where SGLang's own
    ``set_dsa_prefill_impl`` switches (fp8 KV, Blackwell, EXTEND): a no-prefix batch and a 64K
    prefix with 2K new tokens take ``flashmla_sparse``, KV tokens at the factor take
    ``flashmla_kv``."""
    import torch
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    reason = backend_verdict("flashmla_auto", "fp8_e4m3", 10, ragged_fixed=False).reason
    factor = int(re.search(r"fewer than (\d+) x its query tokens", reason).group(1))

    def picks(kv: int, q: int) -> str:
        backend = SimpleNamespace(
            _is_in_breakable_cuda_graph=lambda: False, _is_in_tc_piecewise_cuda_graph=lambda: False,
            _get_device_sm=lambda: 100, _is_blackwell=lambda: True, supports_mha_one_shot=False,
            enable_auto_select_prefill_impl=True, dsa_kv_cache_store_fp8=True,
            dsa_prefill_impl=None,
        )  # fmt: skip
        batch = SimpleNamespace(
            forward_mode=ForwardMode.EXTEND, seq_lens_cpu=torch.tensor([kv]), seq_lens_sum=kv,
            extend_num_tokens=q,
        )  # fmt: skip
        DeepseekSparseAttnBackend.set_dsa_prefill_impl(backend, batch)
        return backend.dsa_prefill_impl

    assert picks(2048, 2048) == picks(65536 + 2048, 2048) == "flashmla_sparse"
    assert picks(factor * 2048 - 1, 2048) == "flashmla_sparse"
    assert picks(factor * 2048, 2048) == "flashmla_kv"
