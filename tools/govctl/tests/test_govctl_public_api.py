"""The public namespace is exactly `govctl.__all__`."""

from __future__ import annotations

import govctl


def test_all_is_the_public_namespace() -> None:
    public = {n for n in vars(govctl) if not n.startswith("_")} - {"cli", "errors", "annotations"}
    assert set(govctl.__all__) == public
    assert sorted(govctl.__all__) == sorted(set(govctl.__all__))


def test_names() -> None:
    assert govctl.__all__ == [
        "CODES", "REPORTERS", "CheckResult", "Checker", "Diagnostic",
        "ParseResult", "execute", "main",
        "GovctlError", "LifecycleError", "UsageError", "WriteRefused",
    ]  # fmt: skip


def test_check_does_not_import_tomlkit_or_jsonschema_for_valid_files(tmp_path) -> None:
    """Startup cost: a clean `check` needs neither (each costs 0.05-0.1 s to import)."""
    import subprocess
    import sys

    from _govctl_support import FIXTURES

    code = (
        "import sys; from govctl.cli import main; "
        f"rc = main(['check', {str(FIXTURES / 'positive' / 'linked')!r}]); "
        "print(rc, 'tomlkit' in sys.modules, 'jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["0", "False", "False"]
