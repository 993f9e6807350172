"""Where ``--model-path`` points and whether its ``config.json`` can be served, before SGLang.

SGLang 0.5.23 finds out only after its import (about 30 s), and then as ``OSError: Repo id must be
in the form 'repo_name'...`` for a missing local path, ``TypeError: 'NoneType' object is not
subscriptable`` for a config without ``architectures``, or by building a list of
``num_hidden_layers`` entries (10^20 of them reached 11 GB before it was stopped).

The path rule:

- an existing directory must hold ``config.json`` (or ``params.json``, the Mistral format, which
  SGLang converts; then the config is not checked here); an existing ``.gguf`` file is SGLang's;
- a path that does not exist is refused when it looks like one: it starts with ``/``, ``.`` or
  ``~``, or is not a well-formed Hugging Face repo id (``huggingface_hub``'s own
  ``validate_repo_id``), or its first part is an existing local directory (``models/glm51``
  beside a ``models/`` directory is a typo, not a repo);
- a well-formed repo id is SGLang's to download; when its ``config.json`` is already in the local
  Hugging Face cache (no network), that file is checked too;
- a repo id must be resolvable (:func:`check_hub`): with ``HF_HUB_OFFLINE`` set, or when the Hub
  does not answer one request for its ``config.json`` within :data:`HUB_TIMEOUT_S`, a repo whose
  config.json is not cached is refused (SGLang would retry for over a minute, then fail), and one
  whose config.json is cached runs offline (``HF_HUB_OFFLINE=1`` for this process and SGLang's),
  so nothing retries.

The config rule (:func:`config_problems`), applied after ``--json-model-override-args``:
``architectures`` is a non-empty list of names (SGLang picks the model class from the first);
``num_hidden_layers`` is an integer in ``[1, MAX_LAYERS]``; and a DSA model (a DSA architecture
of SGLang with a GLM-5/DeepSeek-V3.2 ``model_type`` or an ``index_topk``) sets every field of
``DSA_FIELDS`` itself, as integers in ``[1, 2**31 - 1]``, with a schedule ``indexcache``
accepts. transformers would fill a missing DSA field with GLM-5's default, which may not be the
model's.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cpkv_cli import InputError, one_line, printable, read_json_object

MAX_LAYERS = 4096
"""Most ``num_hidden_layers`` accepted: the largest DSA model has 78 (GLM-5.x; DeepSeek-V3.2 has
61), and SGLang and transformers build per-layer lists of this length before any weight loads.
The same cap as ``indexcache``'s schedules."""

INT32_MAX = 2**31 - 1
"""Largest model dimension: GPU kernels take them as int32."""

#: SGLang 0.5.23's ``configs.model_config.is_deepseek_dsa`` architectures (a DSA model when the
#: config has ``index_topk`` too); ``tests/test_upstream_model_check.py`` holds this equal to it.
DSA_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "Glm5NextForConditionalGenerationNextN",
        "Glm5NextForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "Dots3NoteForCausalLM",
        "Dots3NoteForCausalLMNextN",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
    }
)
#: What a DSA model's config.json must set: the indexer, the MLA KV row and the layer count.
DSA_FIELDS = (
    "num_hidden_layers",
    "index_topk",
    "index_n_heads",
    "index_head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
)
_INT32_FIELDS = ("index_topk", "index_n_heads", "index_head_dim", "kv_lora_rank")
_INT32_FIELDS += ("qk_rope_head_dim",)

ModelKind = Literal["directory", "mistral", "gguf", "repo"]


@dataclass(frozen=True)
class ModelSource:
    """What ``--model-path`` names.

    Attributes:
        given: the value as written.
        kind: a local directory with config.json, one in the Mistral format, a GGUF file, or a
            Hugging Face repo id.
        config_path: the config.json read (a repo's cached copy), or None when there is none here.
    """

    given: str
    kind: ModelKind
    config_path: Path | None = None


def locate_model(path: str | None, flag: str, revision: str | None = None) -> ModelSource:
    """Apply the path rule of this module to ``--model-path`` (spelled ``flag``).

    Raises:
        InputError: missing, empty, a path that does not exist, a file that is not a model, a
            directory without config.json, or a malformed repo id.
    """
    example = "a local model directory holding config.json or a repo id such as zai-org/GLM-5.1"
    if path is None:
        raise InputError(f"--model-path is required; give {example}")
    if not path.strip():
        raise InputError(f"{flag} is empty; give {example}")
    p, shown = Path(path), printable(path)
    st = _stat(p, flag)
    if st is not None and stat.S_ISDIR(st.st_mode):
        if _stat(p / "config.json", flag) is not None:
            return ModelSource(path, "directory", p / "config.json")
        if (st_params := _stat(p / "params.json", flag)) and stat.S_ISREG(st_params.st_mode):
            return ModelSource(path, "mistral")
        raise InputError(
            f"{flag} {shown} holds no config.json; give the model directory (the one "
            f"with config.json beside the weights)"
        )
    if st is not None:
        if stat.S_ISREG(st.st_mode) and p.suffix == ".gguf":
            return ModelSource(path, "gguf")
        what = "a file" if stat.S_ISREG(st.st_mode) else "not a directory"
        raise InputError(
            f"{flag} {shown} is {what}; give the model directory "
            f"({printable(str(p.parent))} if this is its config.json)"
        )
    if path.startswith("~"):
        raise InputError(
            f"{flag} {shown} does not exist: no shell expanded the '~'; write it as "
            f"{printable(os.path.expanduser(path))}"
        )
    if path.startswith(("/", ".")):
        raise InputError(f"{flag} {shown} does not exist; give {example}")
    if problem := _repo_id_problem(path):
        raise InputError(f"{flag} {shown} does not exist and is {problem}; give {example}")
    head = path.split("/", 1)[0]
    if "/" in path and (st_head := _stat(Path(head), flag)) and stat.S_ISDIR(st_head.st_mode):
        raise InputError(
            f"{flag} {shown} does not exist (taken for a local path: {printable(head)}/ is a "
            f"directory here); give {example}"
        )
    return ModelSource(path, "repo", _cached_repo_config(path, revision))


def _stat(path: Path, flag: str) -> os.stat_result | None:
    """``os.stat(path)``, None when nothing is there; any other failure is a bad input."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a name too long, a symlink loop, no permission
        raise InputError(f"{flag} {printable(str(path))}: {exc.strerror}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise InputError(f"{flag} {printable(str(path))}: {exc}") from None


def _repo_id_problem(repo_id: str) -> str | None:
    """Why ``repo_id`` is not a Hugging Face repo id (``huggingface_hub``'s rule), or None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return (
            "not a Hugging Face repo id either (name or namespace/name: letters, digits, '-', "
            "'_', '.', at most 96 per part, no '--' or '..')"
        )
    return None


def _cached_repo_config(repo_id: str, revision: str | None) -> Path | None:
    """The repo's config.json in the local Hugging Face cache (no network), or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except (ValueError, OSError):
        return None
    return Path(found) if isinstance(found, str) else None


HUB_TIMEOUT_S = 3.0
"""How long cpkv-serve waits for the Hugging Face Hub's answer about a repo id before it takes the
machine for offline: one request, no retry, in a thread it stops waiting for (a hung DNS lookup
is not bound by the request's own timeout), so a refusal comes within 5 s."""


def check_hub(model: ModelSource, flag: str, revision: str | None = None) -> None:
    """A repo id (``model.kind == "repo"``) that cannot be resolved now is refused; one whose
    config.json is cached runs offline when the Hub is out of reach (module docstring).

    Raises:
        InputError: no Hub (offline mode, no network, no answer) and no cached config.json; the
            line says to pass a local folder.
    """
    from huggingface_hub import constants, is_offline_mode

    if is_offline_mode():  # HF_HUB_OFFLINE, else the older TRANSFORMERS_OFFLINE, decides
        why = f"{'HF_HUB' if os.environ.get('HF_HUB_OFFLINE') else 'TRANSFORMERS'}_OFFLINE is set"
    else:
        why = _hub_unreachable(model.given, revision)
    if why is None:
        return
    if model.config_path is not None:
        os.environ["HF_HUB_OFFLINE"] = "1"  # SGLang's processes, which import huggingface_hub
        constants.HF_HUB_OFFLINE = True  # this process, which has
        print(
            f"cpkv-serve: {why}; using the cached {printable(model.given)} offline "
            f"(HF_HUB_OFFLINE=1)",
            file=sys.stderr,
        )
        return
    raise InputError(
        f"{flag} {printable(model.given)} is not a local folder and cannot be resolved: {why}, "
        f"and its config.json is not in the Hugging Face cache ({constants.HF_HUB_CACHE}). Fix: "
        f"pass a local folder holding the model (config.json beside the weights), e.g. one made "
        f"where there is network with: hf download {printable(model.given)} --local-dir DIR"
    )


def _hub_unreachable(repo_id: str, revision: str | None) -> str | None:
    """Why the Hub did not answer one request for the repo's config.json, or None when it did
    (whatever the answer: a missing or gated repo is SGLang's to report)."""
    import httpx
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, "config.json", revision=revision)
    outcome: list[str | None] = []

    def ask() -> None:
        try:
            get_hf_file_metadata(url, timeout=HUB_TIMEOUT_S)
        except httpx.TransportError as exc:  # no route, no DNS, refused, timed out
            outcome.append(
                f"{constants.ENDPOINT} is out of reach ({one_line(str(exc)) or type(exc).__name__})"
            )
            return
        except Exception:  # an answer (404, 401, 5xx...): the Hub is there
            pass
        outcome.append(None)

    thread = threading.Thread(target=ask, name="cpkv-hub-probe", daemon=True)
    thread.start()
    thread.join(HUB_TIMEOUT_S)
    if not outcome:
        return f"{constants.ENDPOINT} did not answer within {HUB_TIMEOUT_S:g} s"
    return outcome[0]


def read_config(path: Path) -> dict[str, Any]:
    """``path`` read as a JSON object by ``cpkv_cli.read_json_object`` (bounded at 16 MiB,
    never blocking on a FIFO).

    Raises:
        InputError: not a regular file, too large, unreadable, not UTF-8 JSON, or not an object.
    """
    return read_json_object(path, fix="give the model's config.json")[1]


def architecture(raw: Mapping[str, Any]) -> str | None:
    """``architectures[0]`` when it is a name, else None."""
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0]:
        return archs[0]
    return None


def is_dsa_config(raw: Mapping[str, Any]) -> bool:
    """Whether SGLang will run ``raw`` as a DSA model (architecture and indexer fields)."""
    from glm_config import is_dsa

    return architecture(raw) in DSA_ARCHITECTURES and is_dsa(raw)


def config_problems(raw: Mapping[str, Any]) -> list[str]:
    """One message per problem of ``raw`` under this module's config rule; empty when none."""
    problems = []
    if architecture(raw) is None:
        problems.append(
            f"architectures is {brief(raw.get('architectures'))}, not a list of model class "
            f'names; SGLang picks the model class from its first entry (e.g. "architectures": '
            f'["GlmMoeDsaForCausalLM"])'
        )
    model_type = raw.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        problems.append(f'model_type must be a string, e.g. "glm_moe_dsa"; got {brief(model_type)}')
        return problems  # transformers picks the config class by it: nothing else is read right
    layers = raw.get("num_hidden_layers")
    if layers is not None and (p := int_problem(layers, "num_hidden_layers", MAX_LAYERS)):
        problems.append(p)
    if not is_dsa_config(raw):
        return problems
    missing = [f for f in DSA_FIELDS if raw.get(f) is None]
    if missing:
        problems.append(
            f"{architecture(raw)} is a DSA model but config.json does not set "
            f"{', '.join(missing)}; transformers would fill GLM-5's defaults, which may not be "
            f"this model's. Fix: copy them from the model's released config.json"
        )
    problems += [
        p
        for f in _INT32_FIELDS
        if raw.get(f) is not None and (p := int_problem(raw[f], f, INT32_MAX))
    ]
    if not problems:
        problems += _schedule_problems(raw)
    return problems


def _schedule_problems(raw: Mapping[str, Any]) -> list[str]:
    from indexcache import IndexCacheError, schedule_from_config

    for key in ("index_topk_freq", "index_skip_topk_offset", "num_nextn_predict_layers"):
        value = raw.get(key)
        minimum = 0 if key == "num_nextn_predict_layers" else 1
        if value is not None and (p := int_problem(value, key, MAX_LAYERS, minimum=minimum)):
            return [p]
    try:
        schedule_from_config(raw)
    except IndexCacheError as err:
        return [str(err)]
    return []


def int_problem(value: Any, name: str, maximum: int, *, minimum: int = 1) -> str | None:
    """Why ``value`` is not an integer in ``[minimum, maximum]``, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return f"{name} must be an integer in [{minimum}, {maximum}]; got {brief(value)}"
    return None


def brief(value: Any) -> str:
    """``value`` for a message: short, and safe for ints too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"
