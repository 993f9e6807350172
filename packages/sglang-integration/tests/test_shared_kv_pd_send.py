"""SGLang 0.5.23's Mooncake PD send from cpkv's sharded pool rebuilds decode's KV bitwise.

One subprocess (``_skv_pd_send_worker.py``) runs, per deployment (bf16 KV and FlashMLA's packed
fp8 KV at CP 2, packed fp8 at CP 4; GLM-5.1 with EAGLE on a prefill node, resolved as
``cpkv-serve --cpkv-shared-kv`` resolves it), a chunked prefill with radix hits over ``N``
``CpkvSharedKVPool`` ranks (target and draft) and SGLang's replicated pool, and after every
chunk each rank's send as SGLang's prefill does it: ``send_kv_chunk``, the sender's page filter
(``filter_kv_indices_for_shard_rank``: the pages this rank owns, as its local pages),
``MooncakeKVManager.transfer_worker`` reading them at ``kv_data_ptrs + page * kv_item_len`` of
our pool's buffers, the indexer pages and the draft's with the final chunk. Decode's pools must
then hold, for every request, exactly the replica's bytes. The one stand-in on the send path
is the transport (Mooncake's transfer engine and the zmq sockets, ``_skv_pd_transport``); the
managers, senders and scheduler are SGLang's classes built without their constructors' sockets
and threads (``_skv_pd_sglang``), and the worker's docstring lists what stands in for the
forwards that fill the pools. Then each planted bug must fail it: a wrong owner rule and a wrong
local page id where our pool persists a token, and a sender that drops an empty final chunk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from _skv_pd_send_worker import CASES, MUTATIONS

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "_skv_pd_send_worker.py"
#: bytes of one page of one layer: 64 rows of 576 bf16, or FlashMLA's packed fp8 rows of 656 B
#: (512 fp8, 4 fp32 scales, 64 bf16); an indexer page is 64 x (128 fp8 + one fp32 scale)
LATENT_PAGE = {"bfloat16": 64 * 576 * 2, "fp8": 64 * 656}
INDEXER_PAGE = 64 * (128 + 4)


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("pd_send") / "result.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(WORKER), str(out)], env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert out.exists(), f"the worker wrote nothing; stderr:\n{proc.stderr[-4000:]}"
    found = json.loads(out.read_text())
    assert found["error"] is None, found["error"]
    return found


def _case(result: dict, name: str, cp: int) -> dict:
    return result["cases"][f"cp{cp} {name}"]


@pytest.mark.parametrize(("name", "cp"), CASES)
def test_decode_holds_the_replicas_bytes(result, name, cp):
    case = _case(result, name, cp)
    assert case["failures"] == []
    assert (case["pool_class"], case["decode_class"]) == ("CpkvSharedKVPool", "DSATokenToKVPool")
    assert case["kv_cache_sharding"]  # the sender takes SGLang's sharded paths


@pytest.mark.parametrize(("name", "cp"), CASES)
def test_the_sender_reads_our_pools_buffers_as_reported(result, name, cp):
    """Item lengths SGLang computed from our pools: latent pages of both row formats, target
    layers then the draft's; the indexer's as a DSA state component, the layer sharing its
    top-k elided (0)."""
    case = _case(result, name, cp)
    latent = LATENT_PAGE["fp8" if name.endswith("fp8") else "bfloat16"]
    assert case["kv_item_lens"] == [latent, latent, latent]
    assert case["num_draft_entries"] == 1
    assert case["state_types"] == ["dsa"]
    assert case["state_item_lens"] == [[INDEXER_PAGE, 0, INDEXER_PAGE]]


@pytest.mark.parametrize(("name", "cp"), CASES)
def test_the_scenario_reached_every_path(result, name, cp):
    """Ranks skipped a non-final chunk without a page of theirs; ranks sent an empty final chunk,
    some carrying indexer pages of earlier chunks; every rank sent one final chunk per request;
    decode had a cached prefix."""
    case = _case(result, name, cp)
    chunks = case["chunks"]
    finals = Counter((c["req"], c["rank"]) for c in chunks if c["last"])
    assert set(finals.values()) == {1} and len(finals) == len(case["decode_cached"]) * cp
    empty_finals = [c for c in chunks if c["last"] and c["pages"] == 0]
    assert any(c["state_pages"] for c in empty_finals)
    assert any(not c["state_pages"] for c in empty_finals)
    middle = Counter(c["rank"] for c in chunks if c["req"] == "A" and not c["last"])
    assert all(middle[r] < 3 for r in range(cp)), middle  # A has 3 non-final chunks
    assert sorted(v for v in case["decode_cached"].values() if v) == [64, 128]


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_planted_bugs_fail_it(result, mutation):
    found = result["mutations"][mutation]
    assert found["count"] > 0, f"{mutation} went unnoticed"
