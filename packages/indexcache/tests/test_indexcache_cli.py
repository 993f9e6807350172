"""``indexcache schedule``: output and FLOPs (bad input: test_indexcache_hostile.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from indexcache import IndexerDims, IndexerSchedule, indexer_flops, schedule_savings
from indexcache.cli import main


@pytest.fixture
def run_line(capsys):
    """Run the CLI in-process; print exit code, stdout and stderr on failure."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        print(f"exit={code}\nstdout:\n{out}\nstderr:\n{err}")
        return code, out, err

    return run


def test_glm5_map(run_line):
    code, out, err = run_line("schedule", "--layers", "78", "--freq", "4", "--offset", "2")
    assert code == 0 and err == ""
    assert out.splitlines()[:2] == [
        "IndexCache schedule: 78 layers from index_topk_freq=4, index_skip_topk_offset=2",
        "  layers  0-19  FFSSS FSSSF SSSFS SSFSS",
    ]
    assert "full layers: 21 of 78: 0, 1, 5, 9, 13," in out and out.count("\n") >= 7
    assert "indexer FLOPs saved: 73.1% (57 of 78 layers skip their indexer)" in out


def test_json_with_seq_len(run_line):
    code, out, _ = run_line(
        "schedule",
        "--layers",
        "78",
        "--freq",
        "4",
        "--offset",
        "3",
        "--seq-len",
        "65536",
        "--nextn",
        "1",
        "--format",
        "json",
    )
    assert code == 0
    r = json.loads(out)
    assert r["full_layers"][:4] == [0, 1, 2, 6] and r["num_full"] == 21
    # layer 76 hands its top-k to shared layer 77; the last main layer hands nothing to NextN
    assert len(r["next_layer_reuses"]) == 79 and r["next_layer_reuses"][76:] == [True, False, False]
    per_layer = indexer_flops(65536, IndexerDims())
    assert r["indexer_flops_unshared"] == 78 * per_layer
    assert r["indexer_flops_shared"] == 21 * per_layer
    assert r["indexer_flops_saved_fraction"] == pytest.approx(57 / 78)


def test_pattern_and_defaults(run_line):
    code, out, _ = run_line("schedule", "--pattern", "FFSF")
    assert code == 0 and "full layers: 3 of 4: 0, 1, 3" in out
    code, out, _ = run_line("schedule", "--layers", "5")
    assert code == 0 and "index_topk_freq=1, index_skip_topk_offset=2" in out
    assert "indexer FLOPs saved: 0.0%" in out


def test_config_dir(run_line, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 12,
                "index_topk_freq": 4,
                "index_skip_topk_offset": 3,
                "hidden_size": 512,
                "q_lora_rank": 64,
                "index_n_heads": 4,
                "index_head_dim": 32,
            }
        )
    )
    code, out, _ = run_line("schedule", "--config", str(tmp_path), "--seq-len", "100")
    assert code == 0 and "full layers: 5 of 12: 0, 1, 2, 6, 10" in out
    assert "(index_topk_freq=4, index_skip_topk_offset=3)" in out.splitlines()[0]
    assert "hidden 512, q_lora_rank 64, 4 x 32" in out and "79.9 MFLOP unshared" in out


LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
}  # fmt: skip
DEEPSEEK_V3 = {  # V3, not V3.2: MLA without the DSA indexer
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
}  # fmt: skip
GLM5 = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"} | {
    "num_hidden_layers": 78, "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128,
}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        (LLAMA, "model_type 'llama' (LlamaForCausalLM) has no DSA lightning indexer"),
        (DEEPSEEK_V3, "model_type 'deepseek_v3' (DeepseekV3ForCausalLM) has no DSA"),
        (GLM5, None),
    ],
    ids=["llama", "deepseek-v3", "glm-5"],
)
def test_config_of_a_model_without_a_dsa_indexer_is_refused(run_line, tmp_path, config, refused):
    """A Llama config printed an all-full schedule, exit 0, where glm-config and cpkv-serve
    refuse the model; the same models are refused here, in one line, exit 2."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, err = run_line("schedule", "--config", str(tmp_path))
    if refused is None:
        assert code == 0 and out.startswith("IndexCache schedule: 78 layers") and err == ""
        return
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"indexcache: error: {tmp_path}/config.json: ")
    assert refused in err and "give a DSA model's config" in err
    glm_config = pytest.importorskip("glm_config")  # its rule refuses the same models
    assert not glm_config.is_dsa(config)


def test_config_with_cli_factor_is_refused(run_line, tmp_path):
    """A LongCat-style config.json: cli_factor is refused by name, exit 2."""
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 8, "cli_factor": 3}))
    code, out, err = run_line("schedule", "--config", str(tmp_path))
    assert code == 2 and out == "" and "cli_factor=3 is not supported" in err


def test_flops_formula_small_case():
    dims = IndexerDims(hidden_size=4, q_lora_rank=2, index_n_heads=1, index_head_dim=3)
    # proj 2*2*(2*3 + 4*3 + 4*1) = 88; pairs 2*1 + 3 = 5 with prefix 1; scoring 2*1*4*5 = 40
    assert indexer_flops(2, dims, prefix_tokens=1) == 128
    s = schedule_savings(IndexerSchedule.from_freq(78, 4, 2))
    assert s.per_layer_flops is None and s.unshared_flops is None
    assert s.saved_fraction == pytest.approx(57 / 78)


def test_module_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "indexcache", "schedule", "--layers", "6", "--freq", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "full layers: 4 of 6: 0, 1, 3, 5" in proc.stdout


def test_dims_and_token_counts_are_int32():
    from indexcache import ScheduleError

    with pytest.raises(ScheduleError, match=r"index_head_dim must be <= 2147483647 \(kernels"):
        IndexerDims(index_head_dim=2**31)
    with pytest.raises(ScheduleError, match=r"hidden_size must be an integer >= 1; got str 'x'"):
        IndexerDims.from_config({"hidden_size": "x"})
    with pytest.raises(ScheduleError, match=r"num_tokens must be <= 2147483647"):
        indexer_flops(2**31)
    assert indexer_flops(2**31 - 1, prefix_tokens=2**31 - 1) > 0


@pytest.mark.parametrize(
    ("argv", "lines"),
    [
        (["--layers", "1"], ["IndexCache schedule: 1 layer from", "(0 of 1 layer skip their"]),
        (
            ["--pattern", "FS"],
            ["IndexCache schedule: 2 layers", "(1 of 2 layers skips its indexer)"],
        ),
    ],
)
def test_counts_and_plurals(run_line, argv, lines):
    code, out, _ = run_line("schedule", *argv)
    assert code == 0 and all(line in out for line in lines)
