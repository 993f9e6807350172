"""``glm-config show`` and ``glm-config set``: output and exit codes.

Bad input: test_glm_config_hostile.py; how ``set`` writes (minimal diff, backup, permissions,
failing disks): test_glm_config_writes.py.
"""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _glmcfg_fixtures import raw, version_family, write_model
from glm_config.cli import main


def _has_transformers() -> bool:
    try:
        importlib.import_module("transformers")
    except ImportError:
        return False
    return True


needs_transformers = pytest.mark.skipif(
    not _has_transformers(), reason="show loads through transformers"
)


@pytest.fixture
def run_line(capsys):
    """Run the CLI in-process; print exit code, stdout and stderr on failure."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        print(f"exit={code}\nstdout:\n{out}\nstderr:\n{err}")
        return code, out, err

    return run


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def _files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


# show --------------------------------------------------------------------------------------------
@needs_transformers
def test_show_text(run_line, tmp_path):
    d = write_model(tmp_path, "glm52_freq4_offset3")
    code, out, err = run_line("show", d)
    assert code == 0 and err == ""
    assert "glm_moe_dsa, 78 layers + 1 NextN" in out
    assert f"loaded (transformers {_tf_version()})" in out
    assert "IndexCache: 21 of 78 layers run the indexer (index_topk_freq)" in out
    repair_rows = {line.split()[0] for line in out.splitlines() if line.endswith("REPAIR")}
    if version_family() == "broken":
        assert repair_rows == {"index_topk_freq", "qk_rope_head_dim", "indexer_types"}
        assert "3 fields need repair" in out and "drops index_topk_freq" in out
    elif version_family() == "right":
        assert repair_rows == set() and "the loaded config matches config.json" in out


@needs_transformers
def test_show_check_exit_code(run_line, tmp_path):
    code, _, _ = run_line("show", write_model(tmp_path, "glm52_freq4_offset3"), "--check")
    assert code == {"broken": 1, "right": 0}.get(version_family(), code)


@needs_transformers
def test_show_json(run_line, tmp_path):
    code, out, _ = run_line(
        "show", write_model(tmp_path, "glm52_shipped") / "config.json", "--format", "json"
    )
    assert code == 0
    r = json.loads(out)
    assert r["schedule"]["full_layers"][:4] == [0, 1, 2, 6] and r["model_type"] == "glm_moe_dsa"
    assert r["fields"]["index_topk_freq"]["expected"] == 4
    assert r["fields"]["indexer_types"]["config_json"][:3] == ["full", "full", "full"]
    assert r["transformers"] == _tf_version()


@needs_transformers
def test_show_deepseek_v32(run_line, tmp_path):
    code, out, _ = run_line("show", write_model(tmp_path, "dsv32_freq4"))
    assert code == 0 and "deepseek_v32, 61 layers + 1 NextN" in out
    if "cannot load it" in out:  # releases without deepseek_v32
        assert "not loaded: transformers" in out
        assert run_line("show", write_model(tmp_path, "dsv32_freq4"), "--check")[0] == 1
    else:
        assert "the loaded config matches config.json" in out


@needs_transformers
def test_show_conflict_warning(run_line, tmp_path):
    d = write_model(tmp_path, "glm52_shipped")
    data = raw("glm52_shipped") | {"index_skip_topk_offset": 2}
    (d / "config.json").write_text(json.dumps(data))
    code, out, _ = run_line("show", d)
    assert code == 0 and "warning:" in out and "takes priority" in out


def test_show_without_transformers(run_line, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    d = write_model(tmp_path, "glm52_freq4_offset3")
    code, out, _ = run_line("show", d)
    assert code == 0 and "not loaded: transformers is not installed" in out
    assert "index_topk_freq         4            -" in out
    assert run_line("show", d, "--check")[0] == 1


# set ---------------------------------------------------------------------------------------------
def test_set_writes_backup_and_preserves_format(run_line, tmp_path):
    d = write_model(tmp_path, "glm5_plain", indent=4)
    cfg = d / "config.json"
    original = cfg.read_bytes()
    os.chmod(cfg, 0o640)
    code, out, err = run_line("set", d, "index_topk_freq=4", "index_skip_topk_offset=3")
    assert code == 0 and err == ""
    assert "index_topk_freq: null -> 4" in out and "backup: " in out
    backups = [p for p in d.iterdir() if p.name.startswith("config.json.bak-")]
    assert len(backups) == 1 and backups[0].read_bytes() == original
    assert _files(d) == {"config.json", backups[0].name}  # no temp file left
    text = cfg.read_text()
    new = json.loads(text)
    assert new == raw("glm5_plain") | {"index_topk_freq": 4, "index_skip_topk_offset": 3}
    assert list(new)[: len(raw("glm5_plain"))] == list(raw("glm5_plain"))  # key order kept
    assert text.startswith('{\n    "architectures"') and text.endswith("}\n")
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o640


def test_set_recomputes_a_shipped_indexer_types(run_line, tmp_path):
    d = write_model(tmp_path, "glm52_shipped")
    code, out, _ = run_line("set", d, "index_topk_freq=1")
    assert code == 0 and "indexer_types: " in out and "(recomputed" in out
    new = json.loads((d / "config.json").read_text())
    assert new["indexer_types"] == ["full"] * 78 and new["index_topk_freq"] == 1


def test_set_replaces_an_invalid_shipped_indexer_types(run_line, tmp_path):
    """A stale list (layer 0 shared) makes the file invalid: refused, then with --force printed as
    it was and recomputed."""
    d = write_model(tmp_path, "glm52_shipped")
    (d / "config.json").write_text(
        json.dumps(raw("glm52_shipped") | {"indexer_types": ["shared"] + ["full"] * 77})
    )
    code, out, err = run_line("set", d, "index_topk_freq=1")
    assert code == 2 and "already has 1 error: indexer_types[0] is 'shared'" in err
    assert "pass --force to edit it anyway" in err
    code, out, err = run_line("set", d, "index_topk_freq=1", "--force")
    assert code == 0 and err == ""
    assert "warning: --force: editing despite 1 error: indexer_types[0] is 'shared'" in out
    assert f"indexer_types: S{'F' * 19}... (77 of 78 full) -> {'F' * 20}... (78 of 78 full)" in out
    assert json.loads((d / "config.json").read_text())["indexer_types"] == ["full"] * 78


def test_set_pattern_then_back_to_freq(run_line, tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    pattern = "FF" + "S" * 76
    assert run_line("set", d, f"index_topk_pattern={pattern}")[0] == 0
    assert json.loads((d / "config.json").read_text())["index_topk_pattern"] == pattern
    code, _, err = run_line("set", d, "index_topk_freq=2")
    assert code == 2 and "index_topk_pattern is set and takes priority" in err
    assert run_line("set", d, "index_topk_pattern=null", "index_topk_freq=2")[0] == 0
    new = json.loads((d / "config.json").read_text())
    assert new["index_topk_pattern"] is None and new["index_topk_freq"] == 2


def test_set_dry_run_and_no_op_write_nothing(run_line, tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    before = (d / "config.json").read_bytes()
    code, out, _ = run_line("set", d, "index_topk_freq=8", "--dry-run")
    assert code == 0 and "dry run: nothing written" in out
    code, out, _ = run_line("set", d, "index_topk_freq=4")
    assert code == 0 and "already set; nothing written" in out
    assert (d / "config.json").read_bytes() == before and _files(d) == {"config.json"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--force", "index_topk_freq=2"],
        ["--dry-run", "index_topk_freq=2"],
        ["--dry-run", "index_topk_freq=2", "--force", "index_skip_topk_offset=3"],
        ["index_topk_freq=2", "--dry-run"],
    ],
    ids=["force-first", "dry-run-first", "options-between", "options-last"],
)
def test_set_takes_its_options_anywhere(run_line, tmp_path, argv):
    """``set DIR --force index_topk_freq=2`` said "unrecognized arguments: index_topk_freq=2":
    argparse matched both positionals at ``DIR``, before the option."""
    d = write_model(tmp_path, "glm5_freq4")
    code, out, err = run_line("set", d, *argv)
    assert (code, err) == (0, "")
    assert "index_topk_freq: 4 -> 2" in out
    if "index_skip_topk_offset=3" in argv:
        assert "index_skip_topk_offset:" in out and "-> 3" in out
    written = json.loads((d / "config.json").read_text())["index_topk_freq"]
    assert written == (4 if "--dry-run" in argv else 2)


def test_module_entry_point(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    proc = subprocess.run(
        [sys.executable, "-m", "glm_config", "set", str(d), "index_topk_freq=2", "--dry-run"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "index_topk_freq: 4 -> 2" in proc.stdout


def test_show_counts_and_plurals(run_line, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    (tmp_path / "config.json").write_text(json.dumps(raw("glm5_plain") | {"num_hidden_layers": 1}))
    code, out, _ = run_line("show", tmp_path)
    assert code == 0 and "glm_moe_dsa, 1 layer + 1 NextN" in out
    assert "IndexCache: 1 of 1 layer runs the indexer" in out
