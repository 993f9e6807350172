"""A console script's ``main`` under every convention at once."""

from __future__ import annotations

import sys
from collections.abc import Callable

from cpkv_cli._messages import InputError, OutputError, refuse
from cpkv_cli._stdout import quiet_on_closed_stdout


def run(
    prog: str,
    body: Callable[[], int],
    *,
    errors: tuple[type[BaseException], ...] = (),
    interrupted: Callable[[], str] = str,
) -> int:
    """``body()``, its exit status, with the conventions every cpkv console script keeps.

    - an :class:`InputError`, an :class:`OutputError` or an exception of ``errors`` (a
      package's own error classes): one line ``prog: error: ...`` on stderr, exit 2 (usage
      errors are :class:`OneLineParser`'s, whose ``SystemExit`` passes through); so is the
      last flush of stdout failing (``print`` into ``> /dev/full``);
    - a reader that closed stdout: the rest of the output is dropped quietly
      (:func:`quiet_on_closed_stdout`);
    - Ctrl-C, at any point of ``body`` (a heavy import included): ``prog: interrupted`` plus
      ``interrupted()`` (say, what was left as it was), exit 130, no traceback.
    """
    try:

        def guarded() -> int:
            try:
                return body()
            except (InputError, OutputError, *errors) as exc:
                return refuse(prog, exc)

        try:
            return quiet_on_closed_stdout(guarded)
        except OutputError as exc:  # the last flush of stdout failed (a full disk)
            return refuse(prog, exc)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{interrupted()}", file=sys.stderr)
        return 130
