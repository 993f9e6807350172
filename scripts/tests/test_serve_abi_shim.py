"""``scripts/serve/abi_shim.py``: which symbols the shim forwards, and which the wheels miss.

The GPU box runs it on the real wheels and torch; here its two rules are checked on their own:
the forwarded set is read from ``abi_shim.cpp`` (a function declared with ``LINK_NAME`` and given a
body; the dispatch-key interposers are torch's own symbols and are not counted), and only symbols
of torch's namespaces count as missing. The shim source also compiles here (syntax only: this
machine's torch exports the 2.13 names, not 2.11's).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "abi_shim.py"
spec = importlib.util.spec_from_file_location("abi_shim", SCRIPT)
abi_shim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(abi_shim)

FIVE = {
    "_ZN3c1010ValueErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZN3c1019NotImplementedErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZNK2at10TensorBase14const_data_ptrIfEEPKT_v",
    "_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3TagESaIS8_EENS_17_RegisterOrVerifyE",
    "_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorINS_10headeronly3TagESaISB_EE",
}


def test_the_shim_forwards_exactly_the_five_symbols():
    assert abi_shim.forwarded_symbols(abi_shim.SOURCE.read_text()) == FIVE


def test_a_declaration_without_a_body_is_not_forwarded():
    src = (
        'void f(int) LINK_NAME("_ZN3c101fEi");\n'
        'void g(int) LINK_NAME("_ZN3c101gEi");\n'
        "void g(int x) { f(x); }\n"
    )
    assert abi_shim.forwarded_symbols(src) == {"_ZN3c101gEi"}


def test_only_torch_namespaces_count_as_missing():
    imported = {
        "_ZN3c104cuda9SomethingEv",  # c10: missing
        "_ZTVN3c1010ValueErrorE",  # c10 vtable: missing
        "_ZNK2at10TensorBase3dimEv",  # at, exported
        "cudaMalloc",  # C symbol: not torch's
        "_ZNSt6vectorIiSaIiEE9push_backEOi",  # std: not torch's
        "_ZN5torch7Library5_implEv",  # torch: missing
    }
    exported = {"_ZNK2at10TensorBase3dimEv"}
    assert abi_shim.missing_torch_symbols(imported, exported) == {
        "_ZN3c104cuda9SomethingEv",
        "_ZTVN3c1010ValueErrorE",
        "_ZN5torch7Library5_implEv",
    }


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_the_shim_source_compiles():
    subprocess.run(["g++", "-std=c++17", "-fsyntax-only", str(abi_shim.SOURCE)], check=True)


def test_the_carry_pins_every_package():
    """``scripts/serve/carry``: every wheel it downloads is pinned (a pydantic and pydantic-core
    fetched apart at their newest need not pair; the carry must be the set that ran)."""
    text = (SCRIPT.parent / "carry").read_text()
    names = []
    for array in ("SERVER", "PURE"):
        body = text.split(f"{array}=(", 1)[1].split(")", 1)[0]
        names += body.split()
    assert len(names) > 40
    assert [n for n in names if "==" not in n] == []
