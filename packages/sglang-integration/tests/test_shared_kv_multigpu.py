"""cpkv's sharded DSA pool after the real gather over a process group, one process per rank.

The runner is ``_skv_dist_worker.py`` (see its docstring for what is real and what is replaced):
every rank builds SGLang's sharded pool with cpkv's subclass, runs the extend forward through
SGLang's hooked ``prepare_kv_shard_forward`` and reads every request's rows through the
translated tables; the reference is SGLang's unsharded ``DSATokenToKVPool``. Cases: every
cpkv-validate scenario as SGLang batches it (``_skv_scenarios``, SGLang's allocator at page 64),
bf16 and packed fp8 rows.

- On CUDA (``-m gpu``, 2+ devices): one rank per GPU, ``nccl``, the largest power of two of
  GPUs present; CP sizes from the world down to 2; both case sets, fp8 on every case. The pools
  gather through SGLang's own ``PyNcclCommunicator``: nothing is replaced.
- On CPU (``slow``): two ranks under ``gloo`` at CP 2 on two scenarios, the same code with the
  worker's two test doubles (``GlooCommunicator`` for ``PyNcclCommunicator``, and the torch
  stand-in for SGLang's fp8 quantizing store kernel).

With ``CPKV_MULTIGPU_RESULTS=PATH`` each run writes a JSON record there: ``{"benchmark":
"shared-kv-multigpu", "env": ..., "rows": [one row per (cp, dtype, case)]}``.

    CPKV_SHARED_KV=1 CPKV_MULTIGPU_RESULTS=out.json \\
        uv run --frozen pytest packages/sglang-integration/tests/test_shared_kv_multigpu.py -m gpu
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from _gloo_rank import read_ranks

WORKER = Path(__file__).parent / "_skv_dist_worker.py"
RESULTS_ENV = "CPKV_MULTIGPU_RESULTS"
#: the CPU run's scenarios (the Triton interpreter is slow): two cached prefix chains hit side by
#: side, and the fresh RAGGED-offset prompts of cp 2
CPU_SCENARIOS = ("two_prefix_chains", "fresh_prompts_cp2")


def run_ranks(out: Path, world: int, backend: str, args: list[str]) -> tuple[list[dict], str]:
    """Run the worker with ``world`` ranks: every rank's result, and the command line."""
    env = {**os.environ, "CPKV_SHARED_KV": "1", "HF_HUB_OFFLINE": "1"}
    if backend == "gloo":
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, str(WORKER), str(out), "--world", str(world), "--backend", backend]
    proc = subprocess.run(
        [*cmd, *args], env=env, capture_output=True, text=True, timeout=3000, check=False
    )
    return read_ranks(out, world, proc), " ".join([WORKER.name, *cmd[3:], *args])


def record(ranks: list[dict], command: str) -> dict:
    """One row per (cp, dtype, case) rank 0 covered: passed on every rank that ran it."""
    first = ranks[0]
    env = {
        k: first.get(k)
        for k in ("world", "device", "gpu_name", "nccl", "torch", "communicator", "options")
    }
    env |= {"command": command, "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    rows = []
    for tag in first["covered"]:
        cp, dtype, case = tag.split(" ", 2)
        ran = [r for r in ranks if tag in r["covered"]]
        failures = [f for r in ran for f in r["failures"] if f.startswith(f"{tag} ")]
        rows.append({
            "op": "shared_kv_gather", "case": case, "provider": env["communicator"],
            "cp": int(cp[2:]), "dtype": dtype, "ranks": len(ran),
            "bitwise_equal_to_replica": not failures, "failures": failures[:5],
            "gpu_name": env["gpu_name"],
        })  # fmt: skip
    return {"benchmark": "shared-kv-multigpu", "env": env, "rows": rows}


def check(ranks: list[dict], command: str, communicator: str) -> dict:
    """Write the record (``$CPKV_MULTIGPU_RESULTS``), then assert every rank ran the real pools,
    covered each CP's cases, and read the replica's rows."""
    data = record(ranks, command) if ranks[0]["error"] is None else {"ranks": ranks}
    path = os.environ.get(RESULTS_ENV)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=1) + "\n")
    for rank, r in enumerate(ranks):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["classes"] == ["CpkvSharedKVPool", "PageInterleaveDSATokenToKVPool"]
        assert r["communicator"] == communicator
        assert r["failures"] == [], f"rank {rank}: {r['failures'][:5]}"
    cps = ranks[0]["options"]["cps"]
    for rank, r in enumerate(ranks):
        assert {t.split()[0] for t in r["covered"]} == {f"cp{c}" for c in cps if rank < c}
        assert r["checks"] >= len(r["covered"])  # every case ran its reads
    covered = ranks[0]["covered"]
    assert {t.split()[1] for t in covered} == {"bf16", "fp8"}
    return data


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_gloo_available(), reason="torch built without gloo")
def test_gloo_cp2_scenarios_read_the_full_replica_rows(tmp_path):
    args = ["--cases", "scenarios", "--only", *CPU_SCENARIOS, "--fp8", "all"]
    data = check(*run_ranks(tmp_path, 2, "gloo", args), "GlooCommunicator")
    cases = {r["case"].split("/")[0] for r in data["rows"]}
    assert cases == set(CPU_SCENARIOS)
    assert all(r["bitwise_equal_to_replica"] for r in data["rows"])


def _gpu_world() -> int:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return 1 << (n.bit_length() - 1) if n else 0


@pytest.mark.gpu
@pytest.mark.skipif(
    _gpu_world() < 2,
    reason=f"needs 2 or more CUDA devices (one rank per GPU); found {_gpu_world()}",
)
def test_nccl_every_scenario_reads_the_full_replica_rows(tmp_path):
    world = _gpu_world()
    args = ["--cases", "table", "scenarios", "--fp8", "all"]
    data = check(*run_ranks(tmp_path, world, "nccl", args), "PyNcclCommunicator")
    assert all(r["bitwise_equal_to_replica"] for r in data["rows"])
    assert {r["cp"] for r in data["rows"]} == {c for c in (2, 4, 8) if c <= world}


def test_pools_of_one_group_share_one_communicator():
    from _skv_dist_worker import GlooCommunicator, one_communicator_per_group

    build = one_communicator_per_group(GlooCommunicator)
    a, b = object(), object()
    first = build(group=a, device="cuda:0", cta_policy=None)
    assert build(group=a, device="cuda:0", cta_policy=None) is first
    assert isinstance(first, GlooCommunicator) and first.group is a
    assert build(group=b, device="cuda:0", cta_policy=None) is not first
    assert build(group=a, device="cuda:0", cta_policy=1) is not first
