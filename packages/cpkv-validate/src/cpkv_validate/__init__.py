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
"""

from ._alloc_free import CopyOnWriteAllocator
from ._alloc_sglang import SGLangAllocator
from ._compare import TOLERANCE, Report, RequestResult, ScenarioResult
from ._config import PRESETS, ModelConfig
from ._dist import run_reference, run_reference_many
from ._engine import ALLOCATORS, Engine, Leak, StepOutput
from ._http import CompletionsClient, make_prompts, run_http
from ._model import init_weights
from ._pool import Request
from ._ragged import RAGGED_RULES, ragged_chunk_branch, ragged_offsets
from ._report import print_report, write_json
from ._rt import legacy_layout
from ._runner import Options
from ._scenario_text import REST, ScenarioSpec
from ._scenarios import SCENARIOS, Scenario, Step, build_scenario, scenario_names
from .cli import main

__all__ = [
    "ALLOCATORS",
    "PRESETS",
    "RAGGED_RULES",
    "REST",
    "SCENARIOS",
    "TOLERANCE",
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
