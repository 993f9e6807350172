"""The deepgemm-compat console script: doctor and plan, text and JSON."""

from __future__ import annotations

import json

import pytest
from deepgemm_compat import _load
from deepgemm_compat.cli import main


@pytest.fixture
def run(capsys):
    def run_line(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    yield run_line
    _load.use_module(None)


def test_plan_headline(run):
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--split", "interleave")
    assert code == 0
    assert "SGLang's M list: copy of sglang 0.5.23" in out
    assert "m_max 131072 -> dense 16384 (forwards up to 131072 tokens" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    # G, rows, Ms before, Ms after
    assert rows["attn.o_proj"][4:8] == ["1", "cp_local", "131072", "16384"]
    assert rows["mlp.down_proj"][4:8] == ["1", "gathered", "131072", "131072"]
    assert rows["moe.down_proj"][4:8] == ["32", "-", "1024", "1024"]
    assert "total" in out and "fewer warmup calls" in out


def test_plan_zigzag_keeps_sglangs_list(run):
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--split", "zigzag")
    assert code == 0 and "m_max 131072 -> dense 131072" in out
    assert "extend shorter than 16 tokens without CP" in out


def test_plan_fast_to_chunk_is_reported(run):
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--fast", "--fast-to-chunk")
    assert code == 0 and "fast_to_chunk: " in out and "Ms added up to 65536" in out
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--fast")
    assert code == 0 and "fast_to_chunk" not in out


def test_plan_with_draft_outside_cp_does_not_shrink(run):
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--draft")
    assert code == 0 and "m_max 131072 -> dense 131072" in out
    code, out, _ = run("plan", "--chunked", "65536", "--cp", "8", "--draft", "--draft-cp")
    assert "-> dense 16384" in out


def test_plan_json(run):
    code, out, _ = run(
        "plan", "--chunked", "65536", "--cp", "8", "--format", "json", "--shapes", "glm51-reduced"
    )
    doc = json.loads(out)
    assert code == 0 and doc["dense_m_max"] == 16384 and doc["before_total"] == 2 * 131072 + 1024
    # indexer.wq_b shrinks; shared_expert.down_proj (gathered rows) and the MoE keep the list
    assert doc["after_total"] == 16384 + 131072 + 1024
    assert [e["rows"] for e in doc["entries"]] == ["cp_local", "gathered", "gathered"]
    assert doc["m_list_source"] == "copy of sglang 0.5.23" and doc["rank_rows"] == 16384


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (("plan", "--cp", "0"), "--cp must be >= 1, got 0"),
        (("plan", "--draft-cp"), "--draft-cp says the draft model runs under CP; it needs --draft"),
        (("plan", "--ep", "7"), "--ep must divide 256 (GLM-5.1's 256 routed experts"),
        (("plan", "--dense-tp", "5"), "--dense-tp must divide 12288 (GLM-5.1's 12288 dense MLP"),
        (("plan", "--shared-tp", "3"), "--shared-tp must divide 2048 (GLM-5.1's 2048 shared-exp"),
        (("plan", "--m-list", "upstream"), "invalid choice: 'upstream'"),
    ],
)
def test_plan_bad_values_exit_2(run, argv, pattern):
    code, _, err = run(*argv)
    assert code == 2 and pattern in err


def test_plan_bad_choice_exits_2(run):
    code, _, err = run("plan", "--split", "ring")
    assert code == 2 and "invalid choice: 'ring'" in err


def test_help_explains(run):
    code, out, _ = run("--help")
    assert code == 0 and "doctor" in out and "ELF symbol tables" in out
    code, out, _ = run("plan", "--help")
    assert code == 0 and "roundup(ceil(m_max / cp), cp)" in out and "--draft-cp" in out
    assert "update_deep_gemm_config" in out and "--m-list" in out


def test_doctor_on_this_machine(run):
    """Real report: the installed wheel pairs with torch; with no GPU, exit 1 naming the fix."""
    import torch

    code, out, _ = run("doctor", "--format", "json")
    doc = json.loads(out)
    assert doc["environment"]["missing_symbols"] == []
    assert doc["loader"] in ("tvm_ffi", "torch_library")
    assert doc["import"]["ok"] is True
    if torch.cuda.is_available():
        assert code == 0
    else:
        assert code == 1 and [p["code"] for p in doc["problems"]] == ["no-cuda"]
    code, out, _ = run("doctor")
    assert "torch symbols   all resolve" in out and "paged_mqa_logits" in out


def test_doctor_no_import(run):
    code, out, _ = run("doctor", "--no-import")
    assert code == 0 and "install line" in out and "no problems found" in out
