"""cpkv-validate: catch cross-request KV contamination at batch size > 1 under context parallelism.

Two engines. ``reference`` (default): a tiny GlmMoeDsa-shaped stack (MLA latent KV, lightning
indexer with IndexCache, sparse attention over the top-k) on seeded random weights, prefilling
named scenarios over a paged, prefix-sharing KV pool through ``cpkv_runtime`` on ``--cp N``
``torch.distributed`` ranks, with one of two page allocator models (``free``: partial pages
shared and copied on write; ``sglang``: SGLang's page-aligned radix cache). ``http``: a live
OpenAI-compatible server, concurrent batch against sequential golden, greedy. Every request is
compared with itself alone at batch size 1 without CP. ``sglang_offsets`` models SGLang 0.5.23's
RAGGED top-k offsets in batches without prefix under interleave CP (``ragged_offsets``). Nothing
here imports SGLang.

Names are imported on first use (PEP 562): ``import cpkv_validate`` (which the console script
does before parsing its arguments) then costs milliseconds, not torch's seconds, and the http
engine never imports torch at all.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

#: public name -> the private module that defines it
_WHERE = {
    "CopyOnWriteAllocator": "._alloc_free",
    "SGLangAllocator": "._alloc_sglang",
    "TOLERANCE": "._compare",
    "Report": "._compare",
    "RequestResult": "._compare",
    "ScenarioResult": "._compare",
    "PRESETS": "._config",
    "ModelConfig": "._config",
    "run_reference": "._dist",
    "run_reference_many": "._dist",
    "ALLOCATORS": "._engine",
    "Engine": "._engine",
    "Leak": "._engine",
    "StepOutput": "._engine",
    "Completion": "._client",
    "CompletionsClient": "._client",
    "ServerError": "._client",
    "make_prompts": "._http",
    "run_http": "._http",
    "init_weights": "._model",
    "Request": "._pool",
    "RAGGED_RULES": "._ragged",
    "ragged_chunk_branch": "._ragged",
    "ragged_offsets": "._ragged",
    "print_report": "._report",
    "write_json": "._report",
    "legacy_layout": "._rt",
    "Options": "._runner",
    "REST": "._scenario_text",
    "ScenarioSpec": "._scenario_text",
    "SCENARIOS": "._scenarios",
    "Scenario": "._scenarios",
    "Step": "._scenarios",
    "build_scenario": "._scenarios",
    "scenario_names": "._scenarios",
    "main": ".cli",
}

__all__ = [
    "ALLOCATORS",
    "PRESETS",
    "RAGGED_RULES",
    "REST",
    "SCENARIOS",
    "TOLERANCE",
    "Completion",
    "CompletionsClient",
    "CopyOnWriteAllocator",
    "Engine",
    "Leak",
    "ModelConfig",
    "Options",
    "Report",
    "Request",
    "RequestResult",
    "SGLangAllocator",
    "Scenario",
    "ScenarioResult",
    "ScenarioSpec",
    "ServerError",
    "Step",
    "StepOutput",
    "build_scenario",
    "init_weights",
    "legacy_layout",
    "main",
    "make_prompts",
    "print_report",
    "ragged_chunk_branch",
    "ragged_offsets",
    "run_http",
    "run_reference",
    "run_reference_many",
    "scenario_names",
    "write_json",
]


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if _typing.TYPE_CHECKING:  # what the names are, for type checkers and editors
    from ._alloc_free import CopyOnWriteAllocator
    from ._alloc_sglang import SGLangAllocator
    from ._client import Completion, CompletionsClient, ServerError
    from ._compare import TOLERANCE, Report, RequestResult, ScenarioResult
    from ._config import PRESETS, ModelConfig
    from ._dist import run_reference, run_reference_many
    from ._engine import ALLOCATORS, Engine, Leak, StepOutput
    from ._http import make_prompts, run_http
    from ._model import init_weights
    from ._pool import Request
    from ._ragged import RAGGED_RULES, ragged_chunk_branch, ragged_offsets
    from ._report import print_report, write_json
    from ._rt import legacy_layout
    from ._runner import Options
    from ._scenario_text import REST, ScenarioSpec
    from ._scenarios import SCENARIOS, Scenario, Step, build_scenario, scenario_names
    from .cli import main
