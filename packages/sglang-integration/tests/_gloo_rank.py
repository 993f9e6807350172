"""One spawned rank of a shared-KV suite over gloo: its process group, and its record
(``rank<r>.json``), written whatever happened, so that the test reads each rank's outcome, its
traceback included, instead of a hang or a missing file."""

from __future__ import annotations

import contextlib
import datetime
import json
import socket
import subprocess
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch.distributed as dist


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the ranks' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gloo_rank(
    rank: int, world: int, port: int, out_dir: str | Path, result: dict, timeout_s: int
) -> Iterator[None]:
    """Join the gloo group, run the block, then write ``result`` to ``out_dir/rank<r>.json``.

    An exception in the block is recorded in ``result["error"]`` (its traceback) and not raised:
    the rank still writes its record and leaves the group. ``result["seconds"]["total"]`` is the
    whole rank's wall time.
    """
    t0 = time.monotonic()
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        yield
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        result.setdefault("seconds", {})["total"] = round(time.monotonic() - t0, 1)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result, default=str))
        if dist.is_initialized():
            dist.destroy_process_group()


def read_ranks(out_dir: Path, world: int, proc: subprocess.CompletedProcess) -> list[dict]:
    """Every rank's record; a rank that wrote none fails the test with the worker's stderr."""
    results = []
    for rank in range(world):
        path = out_dir / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote nothing; worker stderr:\n{proc.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    return results
