"""The reference engine behind an OpenAI-compatible ``/v1/completions`` API (greedy only).

A continuous-batching loop: requests that arrive within a short window are admitted together,
prefilled in one batch (sharing cached prefix pages as ``--allocator`` says: ``free`` shares
partial pages and copies them on write, ``sglang`` shares whole pages only) and then decoded one
token per step, batched with whatever else is running. ``--inverse legacy`` serves with the old
value-keyed inverse, so ``cpkv-validate --url`` has a server that really leaks.

    python -m cpkv_validate.refserver --port 8000 [--inverse legacy] [--allocator sglang]

Text is tokenised by words (``crc32(word) % 448``); generated ids come back as ``t<id>`` words.
The arguments are checked and the port bound before torch and the engine (``_refserver``) are
imported, so a bad argument is refused in well under a second.
"""

from __future__ import annotations

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cpkv_cli import OneLineParser, check_environment, quiet_stdout, run
from cpkv_cli.environment import READ_BY

from ._limits import MAX_SEED
from .cli import ALLOCATOR_MODES

__all__ = ["QuietHTTPServer", "main"]

PROG = "python -m cpkv_validate.refserver"


class QuietHTTPServer(ThreadingHTTPServer):
    """An HTTP server that lets a client hang up: a client that timed out and closed its socket
    (a busy box) is no error of the server's, so only other exceptions print a traceback."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # reset, broken pipe, aborted
            return
        super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m cpkv_validate.refserver``; serves until interrupted.

    Bad input (a port outside 0-65535 or already taken, a seed outside 0..2**63-1) is one line
    on stderr and exit 2, before torch is imported. Ctrl-C while serving stops the server (exit
    0); before that (torch imported, the model being built) it is one line and 130, as in every
    cpkv command.
    """
    return run(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n")[0], environment=READ_BY[PROG])
    p.add_argument("--port", type=int, default=8000, help="0..65535; 0 = any free port (printed)")
    p.add_argument(
        "--inverse",
        choices=["per-request", "legacy"],
        default="per-request",
        help="per-request (default): the fixed (request, page)-keyed inverse; legacy: the old "
        "value-keyed one, which cpkv-validate --url must catch",
    )
    p.add_argument(
        "--allocator",
        choices=list(ALLOCATOR_MODES),
        default="free",
        help="page allocator model; free (default): token-granular prefix hits, partial pages "
        "shared and copied on write; sglang: SGLang's radix cache, hits rounded down to the page",
    )
    p.add_argument("--seed", type=int, default=0, help=f"weights seed, 0..{MAX_SEED}")
    args = p.parse_args(argv)  # --help goes through emit: quiet into a closed pipe
    check_environment(READ_BY[PROG])  # before serving: the engine reads them per request
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be in 0..65535 (0: any free port); got {args.port}")
    if not 0 <= args.seed <= MAX_SEED:
        p.error(f"--seed must be in 0..{MAX_SEED} (a signed 64-bit seed); got {args.seed}")
    try:  # bind first: a taken port is refused before the model is built
        httpd = QuietHTTPServer(("127.0.0.1", args.port), BaseHTTPRequestHandler)
    except OSError as exc:
        p.error(f"--port {args.port}: cannot listen on 127.0.0.1 ({exc.strerror}); pick another")
    from ._refserver import serve  # torch and the engine: only once the arguments are good

    httpd, _ = serve(args.port, args.inverse, args.seed, args.allocator, httpd=httpd)
    with quiet_stdout():  # the address is for a reader; a closed stdout does not stop serving
        print(f"listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
