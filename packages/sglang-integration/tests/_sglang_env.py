"""Shared helpers for the plugin tests that run the real sglang 0.5.23 on a CPU.

On a machine without a GPU exactly one thing is replaced: the GPU capability query
(``torch.cuda.get_device_capability`` and SGLang's platform facts, through SGLang's own
``override_platform``), by ``sglang_cpkv.serve._dry_run.emulated_gpu``, the code ``cpkv-serve
--dry-run --gpu`` runs. Everything else (argument parsing, resolution, HF config parsing,
``load_plugins()``, ``HookRegistry``) is the installed SGLang. The ``sgl_kernel`` import is not
needed by any of these paths and is left alone.

Test modules ``import _sglang_env``: ``conftest.py`` puts this directory on ``sys.path`` (tests run
with ``--import-mode=importlib``); it also holds the ``plugin`` fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

GLM51_DIR = Path(__file__).parent / "fixtures" / "glm51_fp8"
SM90, SM100 = (9, 0), (10, 0)

#: Warnings importing sglang 0.5.23 on a CPU box raises from code we cannot change.
SGLANG_IMPORT_WARNINGS = [
    # why: sglang's AWQ/GGUF quantization modules warn at import time when CUDA is absent
    pytest.mark.filterwarnings("ignore:Only CUDA:UserWarning"),
    # why: flashinfer's CuTe DSL kernels import deprecated cutlass.utils names
    pytest.mark.filterwarnings("ignore:cutlass\\.utils:DeprecationWarning"),
    # why: SWIG-generated extension types (imported via sglang deps) lack __module__
    pytest.mark.filterwarnings("ignore:builtin type Swig:DeprecationWarning"),
]


def glm51_argv(*extra: str) -> list[str]:
    """``--model-path <fixture> --tp 8`` plus ``extra``: an 8-GPU GLM-5.1-FP8 node."""
    return ["--model-path", str(GLM51_DIR), "--tp", "8", *extra]


def resolve(argv: list[str], capability: tuple[int, int]):
    """Resolve ``argv`` with the plugin active on an emulated GPU (``cpkv-serve``'s path)."""
    from sglang_cpkv.serve._dry_run import resolve as _resolve

    return _resolve(argv, capability)


def resolved(server_args, name: str):
    """SGLang's resolved value of a field."""
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(server_args, name)


def full_layers(hf_config) -> list[int]:
    """Layers whose indexer runs, by SGLang's own per-layer rule (what the model builds)."""
    from sglang.srt.configs.model_config import dsa_layer_skips_topk

    return [i for i in range(hf_config.num_hidden_layers) if not dsa_layer_skips_topk(hf_config, i)]
