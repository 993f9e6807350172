"""The few SGLang server arguments ``cpkv-serve`` checks before importing SGLang.

Importing SGLang takes tens of seconds, so a bad model path or a ``--tp`` the machine cannot host
is found here first, by reading argv the way SGLang 0.5.23's argparse parser does for these
options: exact option strings and aliases, ``--opt=value``, the last occurrence winning, ``int()``
for integers, and abbreviations (SGLang's parser allows them: ``--tp 8`` is ``--tp-size 8``).
An abbreviation is ours only from the shortest prefix that SGLang resolves to that option alone;
``tests/test_upstream_sglang_argv.py`` holds every prefix of every string below equal to what
SGLang's own parser makes of it. Everything else in argv is left to SGLang, and so are the values
SGLang's ``--config FILE`` merges in from a YAML file (only SGLang checks those).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cpkv_cli import InputError

#: dest -> {option string: shortest abbreviation SGLang 0.5.23 resolves to it}.
OPTIONS: dict[str, dict[str, str]] = {
    "model_path": {"--model-path": "--model-p", "--model": "--model"},
    "revision": {"--revision": "--rev"},
    "json_model_override_args": {"--json-model-override-args": "--j"},
    "tp_size": {"--tp-size": "--tp", "--tensor-parallel-size": "--te"},
    "pp_size": {"--pp-size": "--pp-s", "--pipeline-parallel-size": "--pi"},
    "dp_size": {"--dp-size": "--dp", "--data-parallel-size": "--da"},
    "attn_dp_size": {
        "--attn-dp-size": "--attn-d",
        "--attention-data-parallel-size": "--attention-d",
    },
    "attn_cp_size": {
        "--attn-cp-size": "--attn-c",
        "--attention-context-parallel-size": "--attention-c",
    },
    "nnodes": {"--nnodes": "--nn"},
    "node_rank": {"--node-rank": "--nod"},
    "device": {"--device": "--dev"},
    "base_gpu_id": {"--base-gpu-id": "--bas"},
    "gpu_id_step": {"--gpu-id-step": "--gp"},
    "enable_prefill_cp": {"--enable-prefill-cp": "--enable-prefill-c"},
}
INT_DESTS = frozenset(
    {"tp_size", "pp_size", "dp_size", "attn_dp_size", "attn_cp_size", "nnodes", "node_rank"}
    | {"base_gpu_id", "gpu_id_step"}
)
FLAG_DESTS = frozenset({"enable_prefill_cp"})  # store_true: no value
#: What argparse takes for a value although it starts with "-" (its negative-number pattern).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_EXAMPLES = {
    "model_path": "--model-path ./glm51",
    "revision": "--revision main",
    "json_model_override_args": "--json-model-override-args '{\"index_topk_freq\": 4}'",
    "tp_size": "--tp-size 8",
    "device": "--device cuda",
}


@dataclass(frozen=True)
class SGLangArgs:
    """The checked subset of SGLang's arguments, with SGLang's defaults.

    Attributes:
        spelled: dest -> the option string as the user wrote it (``"--tp"``), for messages.
    """

    model_path: str | None = None
    revision: str | None = None
    json_model_override_args: str = "{}"
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    attn_cp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    device: str | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    enable_prefill_cp: bool = False
    spelled: dict[str, str] = field(default_factory=dict)

    def name(self, dest: str) -> str:
        """The option as the user wrote it, else its main spelling."""
        return self.spelled.get(dest) or next(iter(OPTIONS[dest]))


def option_of(token: str) -> str | None:
    """The dest SGLang's parser gives ``token`` (``"--tp"``, ``"--tp-size=8"``), if one of ours."""
    name = token.split("=", 1)[0]
    for dest, strings in OPTIONS.items():
        for full, shortest in strings.items():
            if name == full or (full.startswith(name) and name.startswith(shortest)):
                return dest
    return None


def positional_model_path(argv: Sequence[str]) -> list[str]:
    """``sglang serve <model> ...`` as ``--model-path <model> ...`` (what ``sglang serve`` does)."""
    if argv and not argv[0].startswith("-"):
        return ["--model-path", argv[0], *argv[1:]]
    return list(argv)


def read_sglang_args(argv: Sequence[str]) -> SGLangArgs:
    """Read the options of :data:`OPTIONS` from ``argv`` (SGLang's arguments only).

    Raises:
        InputError: an option of ours lacks its value, or an integer option is not an integer.
    """
    values: dict[str, object] = {}
    spelled: dict[str, str] = {}
    argv = positional_model_path(argv)
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            break
        dest = option_of(token) if token.startswith("--") else None
        if dest is None:
            continue
        name, eq, text = token.partition("=")
        spelled[dest] = name
        if dest in FLAG_DESTS:
            values[dest] = True
            continue
        if not eq:
            if i >= len(argv) or (argv[i].startswith("-") and not _NEGATIVE_NUMBER.match(argv[i])):
                raise InputError(f"{name} needs a value; e.g. {_example(dest)}")
            text = argv[i]
            i += 1
        values[dest] = _int(name, text, dest) if dest in INT_DESTS else text
    return SGLangArgs(**values, spelled=spelled)  # type: ignore[arg-type]


def _int(name: str, text: str, dest: str) -> int:
    try:
        return int(text)  # what argparse's type=int does (so " 8 " and "1_000" are numbers)
    except ValueError:
        raise InputError(f"{name} {_show(text)} is not an integer; e.g. {_example(dest)}") from None


def _example(dest: str) -> str:
    return _EXAMPLES.get(dest, f"{next(iter(OPTIONS[dest]))} 1")


def _show(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:30]!r}... ({len(text)} characters)"
