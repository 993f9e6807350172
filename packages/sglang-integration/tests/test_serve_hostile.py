"""``cpkv-serve`` on hostile input: one line, exit 2, before SGLang, nothing spawned or written.

Each case runs the installed console script in a fresh interpreter under ``_serve_guard``: an
import of SGLang, torch or transformers ends the run with status 97, so "refused before SGLang is
imported" is checked by what was imported, not by time (the machine's CUDA devices are counted
through the driver API, without torch); every process spawn is logged through Python's audit
events; the peak RSS is read from the child's own ``VmHWM``; and the directories it could write
to (its working directory, ``HOME``, the Hugging Face cache, the model directories) are compared
before and after. The wall time of each run is printed (measured, not asserted).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _serve_guard import GUARD_EXIT, guarded_run, tree
from hostile_cli import run_interrupted_at_import
from sglang_cpkv.serve._machine import cuda_device_count

FIXTURE = Path(__file__).parent / "fixtures" / "glm51_fp8" / "config.json"
GLM = json.loads(FIXTURE.read_text())
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
}  # fmt: skip
DRY = ["--dry-run", "--gpu", "sm100"]
BLOCKED = ("sglang", "torch", "transformers")
#: Peak RSS of a refusal (about 20-35 MiB measured). Importing SGLang takes about 1 GB, torch
#: half of that; a refusal must come before either and before anything of the size of the
#: hostile input is built (num_hidden_layers = 10**20 reached 11 GB before it was stopped).
RSS_LIMIT_KIB = 150 * 1024


def _without(*keys: str) -> dict:
    return {k: v for k, v in GLM.items() if k not in keys}


def _glm(**changes: object) -> dict:
    return {**GLM, **changes}


@dataclass(frozen=True)
class Case:
    """One hostile input.

    Attributes:
        argv: the command line; ``{m}`` is the directory of model directories.
        names: text of the one error line that names the input.
        fix: text of the line that says the fix.
        models: model directory name -> config.json content (a dict is written as JSON, str and
            bytes as they are, a callable makes the file itself).
        env: extra environment variables.
        cuda_absent: the case needs a machine without CUDA (skipped on one with it).
        cuda_present: the case needs a machine with CUDA (skipped on one without it).
    """

    argv: list[str]
    names: str
    fix: str
    models: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cuda_absent: bool = False
    cuda_present: bool = False


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _oversized(path: Path) -> None:
    with open(path, "wb") as f:  # sparse: 17 MiB of size, no disk used
        f.truncate(17 * 2**20)


GLM_DIR = {"glm": GLM}
#: The recipes' repo id, never in the sandbox's Hugging Face cache.
REPO = "zai-org/GLM-5.1-FP8"
#: No Hub: a port nothing listens on (a refused connection), no proxy in the way, not offline.
NO_HUB = {
    "HF_ENDPOINT": "http://127.0.0.1:1", "HF_HUB_OFFLINE": "0", "NO_PROXY": "127.0.0.1",
    "no_proxy": "127.0.0.1",
}  # fmt: skip
CASES: dict[str, Case] = {
    # --model-path
    "model_path_absolute_missing": Case(
        ["--model-path", "/nonexistent", *DRY],
        "--model-path /nonexistent does not exist", "give a local model directory",
    ),
    "model_path_relative_missing": Case(
        ["--model-path", "./glm51-typo", *DRY],
        "--model-path ./glm51-typo does not exist", "give a local model directory",
    ),
    "model_path_positional_missing": Case(
        ["/nonexistent", *DRY], "--model-path /nonexistent does not exist", "give a local",
    ),
    "model_path_unexpanded_tilde": Case(
        ["--model-path", "~/glm51", *DRY], "--model-path ~/glm51 does not exist", "write it as",
    ),
    "model_path_not_a_repo_id": Case(
        ["--model-path", "org/na me", *DRY],
        "--model-path org/na me does not exist and is not a Hugging Face repo id", "give a",
    ),
    "model_path_repo_id_beside_local_dir": Case(
        ["--model-path", "models/glm51", *DRY],
        "taken for a local path: models/ is a directory here", "give a local model directory",
    ),
    "model_path_empty": Case(["--model-path", "", *DRY], "--model-path is empty", "give a"),
    # a repo id that cannot be resolved here: refused at once, not after a minute of retries
    "model_repo_id_offline": Case(
        ["--model-path", REPO, *DRY],
        f"--model-path {REPO} is not a local folder and cannot be resolved: HF_HUB_OFFLINE is "
        "set, and its config.json is not in the Hugging Face cache",
        "pass a local folder holding the model", env={"HF_HUB_OFFLINE": "1"},
    ),
    "model_repo_id_hub_out_of_reach": Case(
        ["--model-path", REPO, "--tp", "8", *DRY],
        f"--model-path {REPO} is not a local folder and cannot be resolved: "
        "http://127.0.0.1:1 is out of reach", f"hf download {REPO} --local-dir DIR", env=NO_HUB,
    ),
    "model_path_required": Case(DRY, "--model-path is required", "give a local model"),
    "model_path_is_config_file": Case(
        ["--model-path", "{m}/glm/config.json", *DRY], "/glm/config.json is a file",
        "give the model directory", GLM_DIR,
    ),
    "model_dir_without_config": Case(
        ["--model-path", "{m}", *DRY], "holds no config.json", "give the model directory",
        GLM_DIR,
    ),
    # config.json
    "config_not_json": Case(
        ["--model-path", "{m}/bad", *DRY], "config.json is not valid JSON", "fix the file",
        {"bad": "{oops"},
    ),
    "config_not_an_object": Case(
        ["--model-path", "{m}/bad", *DRY], "config.json must hold a JSON object",
        "a JSON object", {"bad": "[1, 2]"},
    ),
    "config_not_utf8": Case(
        ["--model-path", "{m}/bad", *DRY], "config.json is not UTF-8", "UTF-8",
        {"bad": b'{"a": "\xff"}'},
    ),
    "config_fifo": Case(
        ["--model-path", "{m}/bad", *DRY], "config.json is not a regular file",
        "give the model's config.json", {"bad": _fifo},
    ),
    "config_oversized": Case(
        ["--model-path", "{m}/bad", *DRY], "config.json is 17,825,792 bytes",
        "over the 16,777,216 a config.json may have", {"bad": _oversized},
    ),
    "config_without_architectures": Case(
        ["--model-path", "{m}/bad", *DRY], "architectures is null",
        '"architectures": ["GlmMoeDsaForCausalLM"]', {"bad": _without("architectures")},
    ),
    "config_dsa_fields_missing": Case(
        ["--model-path", "{m}/bad", *DRY],
        "does not set index_topk, index_n_heads, index_head_dim",
        "copy them from the model's released config.json",
        {"bad": _without("index_topk", "index_n_heads", "index_head_dim")},
    ),
    "config_layers_huge": Case(
        ["--model-path", "{m}/bad", *DRY], "num_hidden_layers", "an integer in [1, 4096]",
        {"bad": _glm(num_hidden_layers=10**20)},
    ),
    "config_layers_string": Case(
        ["--model-path", "{m}/bad", *DRY], 'num_hidden_layers', 'got "78"',
        {"bad": _glm(num_hidden_layers="78")},
    ),
    "config_topk_zero": Case(
        ["--model-path", "{m}/bad", *DRY], "index_topk", "an integer in [1, 2147483647]",
        {"bad": _glm(index_topk=0)},
    ),
    "config_pattern_layer0_shared": Case(
        ["--model-path", "{m}/bad", *DRY], "index_topk_pattern[0] is 'S'",
        "make layer 0 'F'", {"bad": _glm(index_topk_pattern="S" + "F" * 77)},
    ),
    "config_two_problems": Case(
        ["--model-path", "{m}/bad", *DRY], "has 2 problems: (1) architectures",
        "(2) num_hidden_layers must be an integer in [1, 4096]",
        {"bad": _without("architectures") | {"num_hidden_layers": -1}},
    ),
    # --json-model-override-args
    "override_layers_huge": Case(
        ["--model-path", "{m}/glm", "--json-model-override-args", '{"num_hidden_layers": 1e20}',
         *DRY],
        "(with --json-model-override-args applied): num_hidden_layers", "[1, 4096]", GLM_DIR,
    ),
    "override_not_json": Case(
        ["--model-path", "{m}/glm", "--json-model-override-args", "{bad", *DRY],
        "--json-model-override-args is not JSON", "give an object such as", GLM_DIR,
    ),
    "override_not_an_object": Case(
        ["--model-path", "{m}/glm", "--json-model-override-args=[1]", *DRY],
        "--json-model-override-args must be a JSON object", "JSON object", GLM_DIR,
    ),
    # --cpkv-index-*
    # a value past indexcache's layer cap is refused while parsing, before the model is read
    "index_freq_huge": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-freq", "99999999999999999999", *DRY],
        "--cpkv-index-topk-freq 99999999999999999999: index_topk_freq must be <= 4096",
        "layer count", GLM_DIR,
    ),
    "index_freq_over_layers": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-freq", "100", *DRY],
        "--cpkv-index-topk-freq must be in [1, 78] (num_hidden_layers of", "[1, 78]", GLM_DIR,
    ),
    "index_offset_over_layers": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-skip-topk-offset", "79", *DRY],
        "--cpkv-index-skip-topk-offset must be in [1, 78]", "got 79", GLM_DIR,
    ),
    "index_freq_zero": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-freq", "0", *DRY],
        "--cpkv-index-topk-freq 0: index_topk_freq must be an integer >= 1",
        "1 means every layer runs its indexer", GLM_DIR,
    ),
    "index_freq_not_int": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-freq", "four", *DRY],
        "argument --cpkv-index-topk-freq: invalid int value: 'four'", "--cpkv-help", GLM_DIR,
    ),
    "index_pattern_short": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-pattern", "FFS", *DRY],
        "--cpkv-index-topk-pattern: index_topk_pattern has 3 entries but num_hidden_layers "
        "is 78", "give exactly one entry per layer", GLM_DIR,
    ),
    "index_pattern_bad_letter": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-pattern", "FXS", *DRY],
        "--cpkv-index-topk-pattern FXS: index_topk_pattern may hold only 'F'",
        "use one 'F' or 'S' per layer", GLM_DIR,
    ),
    "index_flag_on_non_dsa_model": Case(
        ["--model-path", "{m}/llama", "--cpkv-index-topk-freq", "4", *DRY],
        "--cpkv-index-topk-freq applies to DSA models", "drop the flag", {"llama": LLAMA},
    ),
    "index_flag_with_its_hook_off": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-freq", "4", *DRY],
        "--cpkv-index-topk-freq needs the indexcache-overrides hook, which CPKV_DISABLE_HOOKS "
        "turns off", "take indexcache-overrides out of CPKV_DISABLE_HOOKS", GLM_DIR,
        env={"CPKV_DISABLE_HOOKS": "deepgemm-warmup,indexcache-overrides"},
    ),
    "disable_hooks_unknown_name": Case(
        ["--model-path", "{m}/glm", *DRY], "CPKV_DISABLE_HOOKS names unknown hooks ['warmup']",
        "correct the names", GLM_DIR, env={"CPKV_DISABLE_HOOKS": "warmup"},
    ),
    # the debug-only plants (the GPU suite's; plugin._debug)
    "debug_fault_without_ack": Case(
        ["--model-path", "{m}/glm", *DRY],
        "CPKV_DEBUG_FAULT=swap-kv-pages plants a fault that serves wrong answers on purpose",
        "runs only with CPKV_DEBUG_FAULT_ACK=i-want-wrong-output. Fix: unset CPKV_DEBUG_FAULT",
        GLM_DIR, env={"CPKV_DEBUG_FAULT": "swap-kv-pages"},
    ),
    "debug_fault_unknown": Case(
        ["--model-path", "{m}/glm", *DRY], "CPKV_DEBUG_FAULT='swap' names no debug fault",
        "(known: swap-kv-pages). Fix: unset CPKV_DEBUG_FAULT", GLM_DIR,
        env={"CPKV_DEBUG_FAULT": "swap", "CPKV_DEBUG_FAULT_ACK": "i-want-wrong-output"},
    ),
    "debug_break_names_no_registered_hook": Case(
        ["--model-path", "{m}/glm", *DRY],
        "CPKV_DEBUG_BREAK_HOOK='shared-kv-gate' names no hook this deployment registers",
        "Fix: name one of them", GLM_DIR, env={"CPKV_DEBUG_BREAK_HOOK": "shared-kv-gate"},
    ),
    "unknown_cpkv_flag": Case(
        ["--model-path", "{m}/glm", "--cpkv-index-topk-frq", "4", *DRY],
        "unknown flag --cpkv-index-topk-frq", "did you mean --cpkv-index-topk-freq?", GLM_DIR,
    ),
    # parallel sizes
    "attn_cp_zero": Case(
        ["--model-path", "{m}/glm", "--tp", "8", "--enable-prefill-cp", "--cp-strategy",
         "interleave", "--attn-cp-size", "0", *DRY],
        "--attn-cp-size 0 is not an attention CP size for --tp 8 (SGLang documents no 0/auto",
        "give one that divides it: 1, 2, 4, 8", GLM_DIR,
    ),
    "attn_cp_not_a_divisor": Case(
        ["--model-path", "{m}/glm", "--tp", "8", "--attn-cp-size", "3", *DRY],
        "--attn-cp-size 3 is not an attention CP size for --tp 8", "1, 2, 4, 8", GLM_DIR,
    ),
    "attn_cp_over_tp_long_spelling": Case(
        ["--model-path", "{m}/glm", "--tensor-parallel-size=8",
         "--attention-context-parallel-size=16", *DRY],
        "--attention-context-parallel-size 16 is not an attention CP size for "
        "--tensor-parallel-size 8", "1, 2, 4, 8", GLM_DIR,
    ),
    "tp_zero": Case(
        ["--model-path", "{m}/glm", "--tp", "0", *DRY], "--tp 0 must be at least 1",
        "at least 1", GLM_DIR,
    ),
    "tp_negative": Case(
        ["--model-path", "{m}/glm", "--tp-size", "-1", *DRY], "--tp-size -1 must be at least 1",
        "at least 1", GLM_DIR,
    ),
    "tp_not_an_integer": Case(
        ["--model-path", "{m}/glm", "--tp", "eight", *DRY], "--tp 'eight' is not an integer",
        "e.g. --tp-size 8", GLM_DIR,
    ),
    "tp_without_value": Case(
        ["--model-path", "{m}/glm", *DRY, "--tp"], "--tp needs a value", "e.g. --tp-size 8",
        GLM_DIR,
    ),
    "tp_huge_dry_run": Case(
        ["--model-path", "{m}/glm", "--tp", "99999999999999999999", *DRY],
        "--tp 99999999999999999999 puts 99999999999999999999 ranks on this node",
        "at most 8 per node", GLM_DIR,
    ),
    "nnodes_zero": Case(
        ["--model-path", "{m}/glm", "--nnodes", "0", *DRY], "--nnodes 0 must be at least 1",
        "at least 1", GLM_DIR,
    ),
    "node_rank_out_of_range": Case(
        ["--model-path", "{m}/glm", "--tp", "16", "--nnodes", "2", "--node-rank", "2", *DRY],
        "--node-rank 2 must be below --nnodes 2", "ranks count from 0", GLM_DIR,
    ),
    "base_gpu_id_past_the_node": Case(
        ["--model-path", "{m}/glm", "--tp", "8", "--base-gpu-id", "1", *DRY],
        "--base-gpu-id 1 with --gpu-id-step 1 puts rank 7 on GPU 8",
        "one node of at most 8 GPUs", GLM_DIR,
    ),
    "shared_kv_without_prefill_cp": Case(
        ["--model-path", "{m}/glm", "--cpkv-shared-kv", *DRY],
        "--cpkv-shared-kv shards the KV pool over the attention-CP ranks, and this deployment "
        "has prefill CP off (no --enable-prefill-cp)", "or run prefill CP over several GPUs",
        GLM_DIR,
    ),
    # cpkv-serve's own flags
    "gpu_unknown": Case(
        ["--model-path", "{m}/glm", "--dry-run", "--gpu", "sm80"],
        "argument --gpu: invalid choice: 'sm80'", "choose from", GLM_DIR,
    ),
    "gpu_without_dry_run": Case(
        ["--model-path", "{m}/glm", "--gpu", "sm90"], "--gpu only applies to --dry-run",
        "a real server uses the GPUs it runs on", GLM_DIR,
    ),
    "dry_run_misspelt": Case(
        ["--model-path", "{m}/glm", "--dry-runn"],
        "unrecognized argument --dry-runn; did you mean --dry-run?", "cpkv-serve --cpkv-help",
        GLM_DIR,
    ),
    "dry_run_format_unknown": Case(
        ["--model-path", "{m}/glm", *DRY, "--dry-run-format", "yaml"],
        "argument --dry-run-format: invalid choice: 'yaml'", "choose from", GLM_DIR,
    ),
    "gpu_mem_negative": Case(
        ["--model-path", "{m}/glm", *DRY, "--cpkv-shared-kv", "--cpkv-gpu-mem-gib", "-1"],
        "argument --cpkv-gpu-mem-gib: '-1' is not a GPU's memory", "in (0, 4096]", GLM_DIR,
    ),
    "gpu_mem_nan": Case(
        ["--model-path", "{m}/glm", *DRY, "--cpkv-shared-kv", "--cpkv-gpu-mem-gib", "nan"],
        "'nan' is not a GPU's memory", "e.g. 141 (H200)", GLM_DIR,
    ),
    "gpu_mem_inf": Case(
        ["--model-path", "{m}/glm", *DRY, "--cpkv-gpu-mem-gib=inf"],
        "'inf' is not a GPU's memory", "in (0, 4096]", GLM_DIR,
    ),
    "gpu_mem_zero": Case(
        ["--model-path", "{m}/glm", *DRY, "--cpkv-gpu-mem-gib", "0"],
        "'0' is not a GPU's memory", "in (0, 4096]", GLM_DIR,
    ),
    "gpu_mem_bytes": Case(
        ["--model-path", "{m}/glm", *DRY, "--cpkv-gpu-mem-gib", "151397597184"],
        "'151397597184' is not a GPU's memory", "GiB per GPU", GLM_DIR,
    ),
    # SGLang's own arguments, from the table of its parser (sglang_options.json)
    "sglang_option_misspelt": Case(
        ["--model-path", "{m}/glm", *DRY, "--cp-stratgy", "interleave"],
        "unrecognized arguments: --cp-stratgy interleave", "did you mean --cp-strategy?",
        GLM_DIR,
    ),
    "sglang_choice_bad": Case(
        ["--model-path", "{m}/glm", *DRY, "--cp-strategy", "bogus"],
        "argument --cp-strategy: invalid choice: 'bogus'", "choose from 'zigzag', 'interleave'",
        GLM_DIR,
    ),
    "sglang_option_ambiguous": Case(
        ["--model-path", "{m}/glm", *DRY, "--cp", "interleave"],
        "ambiguous option: --cp could match --cp-strategy, --cpu-offload-gb",
        "checked before its import", GLM_DIR,
    ),
    "sglang_float_bad": Case(
        ["--model-path", "{m}/glm", *DRY, "--mem-fraction-static", "most"],
        "argument --mem-fraction-static: invalid float value: 'most'", "SGLang would refuse",
        GLM_DIR,
    ),
    "sglang_flag_with_value": Case(
        ["--model-path", "{m}/glm", *DRY, "--enable-prefill-cp=yes"],
        "argument --enable-prefill-cp: ignored explicit argument 'yes'", "SGLang would refuse",
        GLM_DIR,
    ),
    # the machine (serving, or a dry run of this machine)
    "serve_more_ranks_than_the_machine": Case(
        ["--model-path", "{m}/glm", "--tp", "100000"],
        "--tp 100000 puts 100000 ranks on this node, but", "at most", GLM_DIR, cuda_present=True,
    ),
    "serve_without_a_gpu": Case(
        ["--model-path", "{m}/glm", "--tp", "8"],
        "no CUDA GPU is visible on this machine, and cpkv-serve serves on CUDA GPUs",
        "run on a GPU host, or add --dry-run --gpu sm90|sm100", GLM_DIR, cuda_absent=True,
    ),
    "serve_cpu_more_ranks_than_cores": Case(
        ["--model-path", "{m}/glm", "--device", "cpu", "--tp", "100000"],
        "--tp 100000 puts 100000 ranks on this node, but this process may run on",
        "at most", GLM_DIR,
    ),
    "serve_cuda_without_a_gpu": Case(
        ["--model-path", "{m}/glm", "--device", "cuda"],
        "--device cuda, but no CUDA device is visible", "add --dry-run --gpu sm90|sm100",
        GLM_DIR, cuda_absent=True,
    ),
    "dry_run_of_this_machine_without_a_gpu": Case(
        ["--model-path", "{m}/glm", "--dry-run"], "no CUDA GPU on this machine",
        "pass --gpu sm90 or --gpu sm100", GLM_DIR, cuda_absent=True,
    ),
}  # fmt: skip


def _write_models(root: Path, models: dict[str, object]) -> None:
    for name, content in models.items():
        d = root / name
        d.mkdir(parents=True)
        target = d / "config.json"
        if callable(content):
            content(target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(json.dumps(content))


@pytest.fixture
def sandbox(tmp_path: Path) -> Callable[[Case], tuple[list[str], dict[str, str]]]:
    """Directories for one case: models, a working directory (with ``models/``), HOME."""

    def make(case: Case) -> tuple[list[str], dict[str, str]]:
        models = tmp_path / "box" / "models"
        models.mkdir(parents=True)
        _write_models(models, case.models)
        home = tmp_path / "box" / "home"
        home.mkdir()
        argv = [a.replace("{m}", str(models)) for a in case.argv]
        env = {"HOME": str(home), "HF_HOME": str(home / "hf"), "XDG_CACHE_HOME": str(home)}
        return argv, {**env, **case.env}

    return make


def _cuda_present() -> bool:
    return cuda_device_count() > 0


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input(name: str, sandbox, tmp_path: Path):
    case = CASES[name]
    if case.cuda_absent and _cuda_present():
        pytest.skip("needs a machine without CUDA")
    if case.cuda_present and not _cuda_present():
        pytest.skip("needs a machine with CUDA")
    argv, env = sandbox(case)
    box = tmp_path / "box"
    before = tree(box)
    run = guarded_run(argv, tmp_path / "guard", cwd=box, block=BLOCKED, env=env)
    assert run.code == 2, run
    lines = run.err.splitlines()
    assert len(lines) == 1, run
    assert lines[0].startswith("cpkv-serve: error: "), run
    assert case.names in lines[0] and case.fix in lines[0], run
    assert run.out == ""
    assert run.spawns == [], "a refusal must not start a process"
    assert tree(box) == before, "a refusal must not write anything"
    assert 0 < run.peak_rss_kib < RSS_LIMIT_KIB, run


def test_a_hub_that_never_answers_is_one_request(sandbox, tmp_path: Path):
    """A Hub that takes the connection and never answers (a listening socket nobody accepts
    from): one request, cut off after ``HUB_TIMEOUT_S``, and the one-line refusal; no retry."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as silent:
        hub = f"http://127.0.0.1:{silent.getsockname()[1]}"
        argv, env = sandbox(Case(["--model-path", REPO, *DRY], "", "", env=NO_HUB))
        run = guarded_run(
            argv, tmp_path / "guard", cwd=tmp_path / "box", block=BLOCKED,
            env={**env, "HF_ENDPOINT": hub},
        )  # fmt: skip
    assert run.code == 2 and run.out == "", run
    assert run.err.count("\n") == 1 and "Retry" not in run.err, run
    assert run.err.startswith(
        f"cpkv-serve: error: --model-path {REPO} is not a local folder and cannot be resolved: "
        f"{hub} "
    ), run
    assert "pass a local folder holding the model" in run.err


def test_a_cached_repo_runs_offline_when_the_hub_is_out_of_reach(sandbox, tmp_path: Path):
    """With the repo's config.json in the Hugging Face cache and no Hub, the run goes on offline:
    SGLang resolved it after retrying the Hub five times (over 30 s); now with
    ``HF_HUB_OFFLINE=1``, one line says so, and nothing retries."""
    argv, env = sandbox(Case(["--model-path", REPO, "--tp", "8", *DRY, "--log-level", "info"],
                             "", "", env=NO_HUB))  # fmt: skip
    repo, commit = Path(env["HF_HOME"]) / "hub" / "models--zai-org--GLM-5.1-FP8", "0" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(GLM))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    run = guarded_run(argv, tmp_path / "guard", cwd=tmp_path / "box", block=(), env=env)
    assert run.code == 0 and run.out.startswith("cpkv-serve --dry-run: GlmMoeDsaForCausalLM"), run
    note = run.err.splitlines()[0]
    assert note.startswith("cpkv-serve: http://127.0.0.1:1 is out of reach ("), run
    assert note.endswith(f"; using the cached {REPO} offline (HF_HUB_OFFLINE=1)"), run
    assert "Setting page size to 64" in run.err  # SGLang's log, at --log-level info
    assert "Retry" not in run.err and "thrown while requesting" not in run.err, run


def test_the_guard_catches_an_sglang_import(tmp_path: Path):
    """The guard is real: a run that gets as far as SGLang is stopped and says so."""
    model = tmp_path / "box" / "models"
    _write_models(model, {"llama": LLAMA})
    run = guarded_run(
        ["--model-path", str(model / "llama"), *DRY], tmp_path / "guard", cwd=tmp_path / "box"
    )
    assert run.code == GUARD_EXIT and "GUARD: import of sglang" in run.err, run


def test_ctrl_c_while_sglang_imports_is_one_line(tmp_path: Path):
    """Ctrl-C during the dry run's SGLang import (tens of seconds): one line, exit 130 (before:
    a ``KeyboardInterrupt`` traceback)."""
    argv = ["--model-path", str(FIXTURE.parent), "--tp", "8", *DRY]
    proc, fired = run_interrupted_at_import("cpkv-serve", argv, "sglang", tmp_path)
    assert fired, "cpkv-serve never imported sglang: the test proves nothing"
    assert proc.returncode == 130 and proc.stderr == "cpkv-serve: interrupted\n"
