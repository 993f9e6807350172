"""Every patch documents its way out: each entry of the hook table says where it runs, which
SGLang releases its signature is checked against, the upstream behaviour it corrects (SGLang file
and function) and the upstream change that would delete it; the README's table and the dry run
print exactly that, from the code.

Whether the releases an entry names really check is held per release in
``test_range_contract.py`` (CI's range step runs it against each accepted release).
"""

from __future__ import annotations

import re
from pathlib import Path

import _sglang_env as env
import pytest
from sglang_cpkv.plugin._releases import TESTED
from sglang_cpkv.plugin.table import SHARED_KV_SPECS, SPECS
from sglang_cpkv.serve import _hook_table as hook_table

pytestmark = env.SGLANG_IMPORT_WARNINGS  # the dry-run test imports sglang

PACKAGE = Path(__file__).parents[1]
ALL = (*SPECS, *SHARED_KV_SPECS)


def _target_file_and_function(target: str) -> tuple[str, str]:
    """``"sglang.srt.a.b.C.m"`` -> ``("sglang/srt/a/b.py", "C.m")``: the module is the longest
    prefix written in lower case (SGLang's modules are; its classes are not)."""
    parts = target.split(".")
    cut = max(i for i, p in enumerate(parts[:-1], 1) if p == p.lower())
    return "/".join(parts[:cut]) + ".py", ".".join(parts[cut:])


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.name)
def test_each_entry_carries_its_way_out(spec):
    assert spec.runs_in and spec.delete_when and spec.why
    file, function = _target_file_and_function(spec.target)
    assert spec.corrects.startswith(f"{file} {function}: "), (spec.corrects, file, function)
    assert len(spec.corrects) > len(file) + len(function) + 20  # says what goes wrong
    assert set(spec.checked) <= set(TESTED) and spec.checked[-1] == TESTED[-1]
    assert list(spec.checked) == [v for v in TESTED if v in spec.checked]  # no gap in the range


def test_the_shared_kv_hooks_are_checked_from_the_first_release_with_the_pool():
    from sglang_cpkv.plugin._releases import SHARED_KV_FIRST

    assert {s.checked for s in SPECS} == {TESTED}
    assert {s.checked[0] for s in SHARED_KV_SPECS} == {SHARED_KV_FIRST}


def test_the_readme_table_is_the_codes():
    text = (PACKAGE / "README.md").read_text()
    block = text.split("<!-- hook-table:start -->\n")[1].split("\n<!-- hook-table:end -->")[0]
    expected = hook_table.markdown()
    assert block == expected, (
        "README.md's hook table differs from the code's; replace the block between the "
        "hook-table markers with:\n" + expected
    )


def test_the_readme_table_names_every_hook_once():
    block = (PACKAGE / "README.md").read_text().split("<!-- hook-table:start -->")[1]
    names = re.findall(r"^\| `([a-z-]+)` \|", block.split("<!-- hook-table:end -->")[0], re.M)
    assert names == [s.name for s in ALL]


def test_text_marks_each_hook_on_or_off():
    on = [SPECS[0].name]
    lines = hook_table.text(hook_table.rows(on))
    assert lines[0].startswith("Hooks on SGLang and their way out")
    assert len(lines) == 1 + 4 * len(ALL)
    assert lines[1] == f"  {SPECS[0].name} (on): {SPECS[0].kind} {SPECS[0].target}"
    assert lines[5].startswith(f"  {SPECS[1].name} (off): ")
    assert lines[2].endswith(f"signature checked on sglang {', '.join(SPECS[0].checked)}")


@pytest.mark.slow
def test_the_dry_run_prints_the_table(capsys):
    from sglang_cpkv.plugin._registered import registered_hooks
    from sglang_cpkv.serve.cli import main

    code = main([*env.glm51_argv(), "--dry-run", "--gpu", "sm100"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    start = out.index("Hooks on SGLang and their way out (plugin/table.py)")
    section = out[start : start + 1 + 4 * len(ALL)]
    assert section == hook_table.text(hook_table.rows(registered_hooks()))
    assert f"  {SPECS[-1].name} (on): {SPECS[-1].kind} {SPECS[-1].target}" in section
