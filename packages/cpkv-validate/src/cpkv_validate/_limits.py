"""The bounds every number given to ``cpkv-validate`` is held to, each with why it is that size.

Checked once, in the CLI, before anything of that size is built or any process started: before
these bounds ``cpkv-validate --cp 1000000`` forked 256 ranks and took 19 GB of a 23 GB machine in
40 s before it was killed.
"""

from __future__ import annotations

MAX_CP_CPU = 16
"""Most CPU ranks (``--device cpu``): each is a forked process on this host, in a gloo full mesh.

Measured (2-core build box, torch 2.14): a rank holds 26-34 MiB of its own memory next to what it
shares with the parent (``cpkv-validate --cp 16``, every scenario: 0.8 GiB PSS over all 17
processes, 39 s). 16 is twice the largest single-node CP (8 GPUs) and covers any CP split SGLang
runs; more ranks only time-share the same cores. The tests run cp 4 on 2 cores. On CUDA the
bound is the visible devices instead (NCCL: one GPU per rank).
"""

MAX_SEED = 2**63 - 1
"""Largest ``--seed``: torch generators and OpenAI-compatible servers take 64-bit signed seeds."""

MAX_CONCURRENCY = 1024
"""Most in-flight requests of the ``http`` batch. Each is a thread and a socket in this process
(so it is also held below the open-file limit); 1024 requests fill any batch a server forms."""

MAX_REQUESTS = 4096
"""Most requests of an ``http`` run. The golden run completes them one at a time: at 0.1-1 s a
completion, 4096 is already 7 minutes to over an hour before the batch starts."""

MAX_TOKENS = 32768
"""Most tokens generated per request (``--max-tokens``). The rule compares a short greedy window
(a near-tie flips everything after it), and both runs keep every request's tokens."""

MAX_TIMEOUT_S = 3600.0
"""Longest per-request wait (``--timeout``): an hour; a server slower than that is not serving."""

FD_RESERVE = 64
"""Open files kept free besides the batch's sockets (interpreter, torch, logs)."""
