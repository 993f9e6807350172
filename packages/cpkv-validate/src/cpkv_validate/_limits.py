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

MIN_CONCURRENCY = 2
"""Fewest in-flight requests of the ``http`` batch: at 1 nothing overlaps, and a bug that needs
two requests in one batch cannot show (``--concurrency 1`` passed such a server)."""

MAX_CONCURRENCY = 1024
"""Most in-flight requests of the ``http`` batch. Each is a thread and a socket in this process
(so it is also held below the open-file limit); 1024 requests fill any batch a server forms."""

MAX_REQUESTS = 4096
"""Most requests of an ``http`` run. The reference runs twice (before and after the batch), one
request at a time, each after a cache flush and a one-token warm-up: at 0.1-1 s a completion,
4096 is already a quarter of an hour to several hours besides the batch."""

MAX_TOKENS = 32768
"""Most tokens generated per request (``--max-tokens``). The rule compares a short greedy window
(a near-tie flips everything after it), and both runs keep every request's tokens."""

PREFIX_WORDS = 200
"""Default ``--prefix-words``: the shared prefix's length in words (``w0`` to ``w999`` and a
space: about 5 bytes, so about 5 tokens for a byte-level tokenizer and a few for a BPE one), so
that every request reads a cached prefix of some hundreds of tokens. A DSA model selects its
top-k keys (2,048 for GLM-5.1 and DeepSeek-V3.2) only from a longer context: below that every key
is kept, and a fault in the selection, or in IndexCache's reuse of it, cannot show; there, give a
prefix of more tokens than the model's top-k."""

MAX_PREFIX_WORDS = 100_000
"""Largest ``--prefix-words``: about half a million tokens, past any served context."""

MAX_TIMEOUT_S = 3600.0
"""Longest per-request wait (``--timeout``): an hour; a server slower than that is not serving."""

FD_RESERVE = 64
"""Open files kept free besides the batch's sockets (interpreter, torch, logs)."""

MIN_COMPARED = 8
"""Default least number of generated tokens compared per request (``--min-compared``): one or
two equal tokens are what a broken server gives too (an empty prefix of a leak, a stop token),
while 8 equal greedy tokens of a model whose outputs differ by prompt are evidence. Counted from
the reply itself (logprob tokens, else words of the text), never from ``usage``."""

MARKER_PIECE = 6
"""Characters of a marker's tag that identify it in an output (``_markers``): a tag is 7 to 9
(the request index, at least two digits, ``x``, four hex digits), so a leak cut by a character
or more is still found; a given 6-character string turns up by chance in 32 random bytes about
once in 10**13."""

DRIFT_EPSILON = 0.1
"""Default ``--drift-epsilon`` (nats): a first difference where the two runs' top-two logprob
gaps add up to this or less is numeric drift, not a leak. It bounds how far rounding may move
the gap between two tokens' logprobs. A batch changes the reduction order, which moves a bf16
logit by about one unit in the last place: 2**-5 = 0.031 at magnitude 4-8, 0.0625 at 8-16; the
gap between two logits moves by up to two of them. 0.1 covers that at magnitude 4-8, where the
tiny served checkpoint's logits sit (its gaps come in steps of 0.031; its unplanted drifts on an
H100 summed to at most 0.0625), but not two full steps at 8-16 (0.125): for a model with larger
logits, or for fp8 KV, whose rounding is coarser (on CPU it flipped tokens at gap sums of 0.125
to 0.35), raise it. Reading another request's KV moves logits by whole units; the marker check
does not depend on it at all."""

MAX_DRIFT_EPSILON = 10.0
"""Largest ``--drift-epsilon``: a gap of e**10 in probability is no near-tie; more would call
almost any difference drift."""

MAX_REPLY_MIB = 16
"""Default cap on one reply (``--max-reply-mib``): a completion of ``MAX_TOKENS`` tokens with
top-2 logprobs is about 250 bytes a token in JSON, 8 MiB; twice that leaves room. A reply past
it is refused in one line (a 100 MB reply was read whole: 545 MB of memory)."""

MAX_REPLY_MIB_LIMIT = 1024
"""Largest ``--max-reply-mib``: a reply is parsed in memory, several times its size."""
