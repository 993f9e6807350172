"""How ``glm-config set`` writes: minimal diffs, backups only on change, nothing lost on failure.

Failing disks: ``RLIMIT_FSIZE`` in a child process makes the kernel itself refuse a write past a
size (``EFBIG``), a real failing write standing in for a full disk; one in-process test doubles a
full disk by making ``os.write`` raise ``ENOSPC`` half-way (this machine has no disk to fill).
Tests run as root here, who may write any file, so read-only refusals are decided by mode bits.
"""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
from _glmcfg_fixtures import LAYERS, raw, write_model
from glm_config import config_errors
from glm_config._jsonedit import edit_text
from glm_config.cli import main
from hostile_cli import run_in_process, run_measured, tree
from hypothesis import given, settings
from hypothesis import strategies as st


def _set(*argv: object):
    return run_in_process(main, ["set", *(str(a) for a in argv)])


def _types(freq: int, offset: int) -> list[str]:
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(LAYERS)]


def _backups(d):
    return sorted(p for p in d.iterdir() if p.name.startswith("config.json.bak-"))


# Minimal diffs ------------------------------------------------------------------------------------
def test_only_the_changed_lines_change(tmp_path):
    """GLM-5.2's shipped layout (indent 2, indexer_types one entry per line): freq 4 -> 2 changes
    the freq line and exactly the indexer_types entries whose type changes, byte for byte."""
    d = write_model(tmp_path, "glm52_shipped")
    before = (d / "config.json").read_text().splitlines(keepends=True)
    run = _set(d, "index_topk_freq=2")
    assert run.code == 0, run.err
    after = (d / "config.json").read_text().splitlines(keepends=True)
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    flips = sum(a != b for a, b in zip(_types(4, 3), _types(2, 3), strict=True))
    freq_line = [i for i, line in enumerate(before) if '"index_topk_freq"' in line]
    assert len(changed) == 1 + flips and freq_line[0] in changed
    assert after[freq_line[0]] == '  "index_topk_freq": 2,\n'
    for i in set(changed) - set(freq_line):
        assert {before[i].strip(" ,\n"), after[i].strip(" ,\n")} == {'"full"', '"shared"'}


def test_a_new_key_is_appended_in_the_files_style(tmp_path):
    d = write_model(tmp_path, "glm5_plain", indent=4)
    original = (d / "config.json").read_text()
    assert _set(d, "index_topk_freq=4").code == 0
    tail = '"vocab_size": 154880\n}\n'
    want = original.replace(tail, '"vocab_size": 154880,\n    "index_topk_freq": 4\n}\n')
    assert (d / "config.json").read_text() == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (  # compact, one line
            '{"model_type":"glm_moe_dsa","num_hidden_layers":4,"index_topk":64,'
            '"index_topk_freq":1}',
            '{"model_type":"glm_moe_dsa","num_hidden_layers":4,"index_topk":64,'
            '"index_topk_freq":2}',
        ),
        (  # CRLF line ends, tabs, a key appended
            '{\r\n\t"model_type": "glm_moe_dsa",\r\n\t"num_hidden_layers": 4,\r\n'
            '\t"index_topk": 64\r\n}\r\n',
            '{\r\n\t"model_type": "glm_moe_dsa",\r\n\t"num_hidden_layers": 4,\r\n'
            '\t"index_topk": 64,\r\n\t"index_topk_freq": 2\r\n}\r\n',
        ),
    ],
    ids=["compact", "crlf_tabs"],
)
def test_unusual_layouts_are_kept(tmp_path, text, want):
    (tmp_path / "config.json").write_bytes(text.encode())
    run = _set(tmp_path, "index_topk_freq=2")
    assert run.code == 0 and "rewritten" not in run.out
    assert (tmp_path / "config.json").read_bytes() == want.encode()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=8))
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=4))


@given(
    data=st.dictionaries(st.text(min_size=1, max_size=6), _VALUES, min_size=1, max_size=8),
    indent=st.sampled_from([None, 1, 2, 4]),
    pick=st.data(),
)
@settings(max_examples=200, deadline=None)
def test_edit_text_changes_exactly_the_lines_of_changed_scalars(data, indent, pick):
    """Setting scalar members (lists left alone) of a dump with one member per line changes those
    members' lines and no other, byte for byte; any layout parses back to the intended object."""
    text = json.dumps(data, indent=indent)
    scalars = sorted(k for k, v in data.items() if not isinstance(v, list))
    keys = pick.draw(st.lists(st.sampled_from(scalars), unique=True)) if scalars else []
    new = data | {k: pick.draw(_SCALARS) for k in keys}
    out, redumped = edit_text(text, new)
    assert not redumped and json.dumps(json.loads(out)) == json.dumps(new)  # order kept
    if indent is None:
        return
    before, after = text.split("\n"), out.split("\n")  # not splitlines: it splits at U+0085
    assert len(after) == len(before)
    # a key's closing quote is its only unescaped one, so '"key": ' starts its line and no other
    changed = [json.dumps(k) + ": " for k in keys if json.dumps(data[k]) != json.dumps(new[k])]
    for old_line, new_line in zip(before, after, strict=True):
        is_changed = any(old_line.lstrip().startswith(prefix) for prefix in changed)
        assert (old_line != new_line) == is_changed, (old_line, new_line)


@given(
    data=st.dictionaries(st.text(min_size=1, max_size=6), _VALUES, max_size=6),
    updates=st.dictionaries(st.text(min_size=1, max_size=6), _VALUES, max_size=4),
    indent=st.sampled_from([None, 2, 4, "\t"]),
    crlf=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_edit_text_any_edit_parses_back_in_the_files_style(data, updates, indent, crlf):
    """Lists that grow, shrink or turn scalar, and new keys: the result is the intended object,
    key order included, with no re-dump, and keeps the file's line ends."""
    text = json.dumps(data, indent=indent)
    if crlf:
        text = text.replace("\n", "\r\n")
    new = data | updates
    out, redumped = edit_text(text, new)
    assert not redumped and json.dumps(json.loads(out)) == json.dumps(new)
    if crlf:
        assert out.count("\n") == out.count("\r\n")


def test_the_fallback_rewrites_the_whole_file_and_says_so(tmp_path, monkeypatch):
    import glm_config._jsonedit as jsonedit

    d = write_model(tmp_path, "glm5_freq4")
    monkeypatch.setattr(jsonedit, "_edit_in_place", lambda text, new: "{}")  # a broken edit
    run = _set(d, "index_topk_freq=2")
    assert run.code == 0 and "note: the whole of" in run.out and "rewritten" in run.out
    assert json.loads((d / "config.json").read_text()) == raw("glm5_freq4") | {"index_topk_freq": 2}


# Backups, no-ops ----------------------------------------------------------------------------------
def test_a_no_op_writes_nothing(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    before = tree(d)
    for argv in (["index_topk_freq=4"], ["index_topk_pattern=null"], ["index_topk=2048"]):
        run = _set(d, *argv)
        assert run.code == 0 and run.out.endswith("already set; nothing written\n")
    assert tree(d) == before  # no backup, same mtime


def test_backup_is_the_old_file_with_its_mode(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    cfg = d / "config.json"
    original = cfg.read_bytes()
    cfg.chmod(0o640)
    assert _set(d, "index_topk_freq=2").code == 0
    (backup,) = _backups(d)
    assert backup.read_bytes() == original and stat.S_IMODE(backup.stat().st_mode) == 0o640
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o640
    assert {p.name for p in d.iterdir()} == {"config.json", backup.name}  # no temp file left
    assert _set(d, "index_topk_freq=3").code == 0 and len(_backups(d)) == 2  # never clobbered


def test_owner_is_kept(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    d = write_model(tmp_path, "glm5_freq4")
    os.chown(d / "config.json", 1234, 2345)
    assert _set(d, "index_topk_freq=2").code == 0
    for p in (d / "config.json", *_backups(d)):
        assert (p.stat().st_uid, p.stat().st_gid) == (1234, 2345)


# Read-only and invalid targets --------------------------------------------------------------------
def test_read_only_needs_force_and_stays_read_only(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    cfg = d / "config.json"
    cfg.chmod(0o444)
    before = tree(d)
    run = _set(d, "index_topk_freq=2")
    assert run.code == 2 and "is read-only (mode 0444)" in run.err and "--force" in run.err
    assert tree(d) == before
    assert _set(d, "index_topk_freq=2", "--force").code == 0
    assert json.loads(cfg.read_text())["index_topk_freq"] == 2
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o444


def test_force_keeps_old_errors_but_adds_none(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    cfg = d / "config.json"
    cfg.write_text(json.dumps(raw("glm5_freq4") | {"index_topk": 10**12}, indent=2))
    old_errors = config_errors(json.loads(cfg.read_text()))
    before = tree(d)
    run = _set(d, "index_topk_pattern=FFS", "--force")  # a new error: refused even so
    assert run.code == 2 and "refused: index_topk_pattern has 3 entries" in run.err
    assert tree(d) == before
    run = _set(d, "index_topk_freq=2", "--force")
    assert run.code == 0 and "warning: --force: editing despite 1 error: index_topk" in run.out
    assert config_errors(json.loads(cfg.read_text())) == old_errors


def test_force_edits_the_last_of_a_duplicated_key(tmp_path):
    text = '{"model_type": "glm_moe_dsa", "num_hidden_layers": 4, "index_topk": 64, '
    text += '"index_topk_freq": 1, "index_topk_freq": 2}'
    (tmp_path / "config.json").write_text(text)
    run = _set(tmp_path, "index_topk_freq=4")
    assert run.code == 2 and "index_topk_freq is written 2 times" in run.err
    assert _set(tmp_path, "index_topk_freq=4", "--force").code == 0
    assert (tmp_path / "config.json").read_text() == text.replace(": 2}", ": 4}")


def test_a_symlinked_config_becomes_a_file_and_its_target_is_kept(tmp_path):
    """The Hugging Face cache links snapshots/<rev>/config.json to a shared blob."""
    d = write_model(tmp_path, "glm5_freq4")
    blob = tmp_path / "blob"
    (d / "config.json").rename(blob)
    (d / "config.json").symlink_to(blob)
    original = blob.read_bytes()
    run = _set(d, "index_topk_freq=2")
    assert run.code == 0 and "was a symlink to" in run.out
    assert not (d / "config.json").is_symlink() and blob.read_bytes() == original
    assert json.loads((d / "config.json").read_text())["index_topk_freq"] == 2


# Failures leave nothing behind --------------------------------------------------------------------
@pytest.mark.parametrize("where", ["backup", "config"])
def test_a_failing_write_leaves_nothing(tmp_path, where):
    """The kernel refuses writes past RLIMIT_FSIZE (EFBIG): at the backup (limit below the old
    file's size) or at the new config.json (the old file fits; the new one, a key longer, not)."""
    d = write_model(tmp_path, "glm5_plain")
    size = (d / "config.json").stat().st_size
    before = tree(d)
    limit = size - 1 if where == "backup" else size
    run = run_measured(
        "glm_config.cli", ["set", str(d), "index_topk_freq=4"], tmp_path, fsize=limit
    )
    assert run.code == 2 and run.err.count("\n") == 1 and "Traceback" not in run.err
    assert "File too large; it is unchanged and no backup is left" in run.err
    assert tree(d) == before


def test_a_full_disk_leaves_nothing(tmp_path, monkeypatch):
    """A double for a full disk: os.write writes half, then raises ENOSPC."""
    d = write_model(tmp_path, "glm5_freq4")
    before = tree(d)
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    run = _set(d, "index_topk_freq=2")
    assert run.code == 2 and "No space left on device; it is unchanged" in run.err
    assert tree(d) == before


def test_a_concurrent_edit_is_not_overwritten(tmp_path, monkeypatch):
    """Someone else writes config.json between glm-config's read and its write (a double: the
    other writer runs inside the edit step)."""
    import glm_config.cli as cli

    d = write_model(tmp_path, "glm5_freq4")
    theirs = json.dumps(raw("glm5_freq4") | {"index_topk": 1024})

    def edit_and_race(text, new):
        (d / "config.json").write_text(theirs)
        return edit_text(text, new)

    monkeypatch.setattr(cli, "edit_text", edit_and_race)
    run = _set(d, "index_topk_freq=2")
    assert run.code == 2 and "changed while glm-config was editing it" in run.err
    assert (d / "config.json").read_text() == theirs and _backups(d) == []


def test_dry_run_writes_nothing(tmp_path):
    d = write_model(tmp_path, "glm5_freq4")
    before = tree(d)
    run = _set(d, "index_topk_freq=8", "--dry-run")
    assert run.code == 0 and "index_topk_freq: 4 -> 8" in run.out and "dry run" in run.out
    assert tree(d) == before
