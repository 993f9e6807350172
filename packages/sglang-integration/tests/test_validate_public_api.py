"""The public surface of ``sglang_cpkv.validate``: ``__all__`` is exactly what it exports."""

from __future__ import annotations

import sglang_cpkv.validate as v

EXPECTED = {
    "CompletionsClient",
    "Engine",
    "Leak",
    "ModelConfig",
    "Options",
    "PRESETS",
    "Report",
    "RequestResult",
    "SCENARIOS",
    "Scenario",
    "ScenarioResult",
    "Step",
    "StepOutput",
    "TOLERANCE",
    "build_scenario",
    "init_weights",
    "legacy_layout",
    "main",
    "make_prompts",
    "print_report",
    "run_http",
    "run_reference",
    "run_reference_many",
    "scenario_names",
    "write_json",
}


def test_all_is_the_public_surface():
    assert set(v.__all__) == EXPECTED
    assert len(v.__all__) == len(EXPECTED)
    public = {n for n in vars(v) if not n.startswith("_")} - {"annotations", "cli", "refserver"}
    assert public == EXPECTED, sorted(public ^ EXPECTED)


def test_console_script_target_exists():
    from sglang_cpkv.validate.cli import main

    assert main is v.main


def test_the_harness_does_not_import_sglang():
    """cpkv-validate checks servers from outside; it must run where SGLang is not installed."""
    import subprocess
    import sys

    code = (
        "import sys, sglang_cpkv.validate, sglang_cpkv.validate.refserver; "
        "bad = sorted(m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
