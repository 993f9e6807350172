"""Every request of ``cpkv-validate --url`` is bounded: in time, connect to last byte
(``--timeout``), and in size (``--max-reply-mib``).

Before, ``--timeout`` bounded each socket read, so a server that trickles its body a byte at a
time held the command forever; and a reply was read whole, whatever its size (100 MB: 545 MB of
memory). Now each is one line and exit 2. Nothing here asserts on time: the trickle test only
guards against the hang it exists to catch (the command, in its own process, is killed after a
minute and the test fails).
"""

from __future__ import annotations

import subprocess
import sys

from _fakes import HugeText, serve
from _servers import endless_server, trickle_server
from cpkv_validate.cli import main
from hostile_cli import run_in_process

MIB = 2**20


def _one_line(run, message: str) -> None:
    assert run.code == 2 and run.out == "", run
    assert run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    assert message in run.err, run.err


def test_timeout_bounds_the_whole_request_of_a_trickling_server():
    with trickle_server(every_s=0.05) as url:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "cpkv_validate", "--url", url, "--timeout", "1"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AssertionError("--timeout 1 did not end a trickling reply in a minute") from None
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith(f"cpkv-validate: error: {url}/v1/models timed out: no whole ")
    assert "within --timeout 1 s (connect to last byte)" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_reply_past_the_default_cap_is_refused_while_it_is_read():
    """64 MiB of valid JSON without a Content-Length: the read stops past the 16 MiB cap (what
    was sent before the client closed is the cap plus socket buffers, not the whole reply)."""
    with endless_server(64 * MIB) as (url, sent):
        run = run_in_process(main, ["--url", url, "--no-progress"])
    _one_line(run, f"{url}/v1/models sent over 16,777,216 bytes, over the reply cap")
    assert "(--max-reply-mib 16)" in run.err
    assert sent[0] < 48 * MIB, sent


def test_a_reply_announced_past_the_cap_is_refused_unread():
    with serve(HugeText(2 * MIB)) as url:
        run = run_in_process(main, ["--url", url, "--max-reply-mib", "1", "--no-progress"])
    _one_line(run, f"{url}/v1/completions announced ")
    assert "over the reply cap (--max-reply-mib 1)" in run.err
