"""The facts the package encodes agree with the wheels (tests/fixtures/surfaces.json) and,
for the installed release, with the real imported module."""

from __future__ import annotations

import inspect

import pytest
from deepgemm_compat import _detect, _surface
from packaging.version import Version

V = Version


def test_fixture_covers_every_published_release(surfaces):
    assert len(surfaces) == 21
    assert next(iter(surfaces)) == "0.0.1" and list(surfaces)[-1] == _detect.NEWEST_CHECKED


def test_pairing_table_matches_the_elf_symbol_check(surfaces):
    for version, data in surfaces.items():
        row = _detect.pairing_for(version)
        assert row is not None, version
        resolves = {
            _detect.torch_minor(t)
            for t, missing in data["torch_missing_symbols"].items()
            if not missing
        }
        assert resolves == set(row[2]), (
            f"{version}: symbols resolve on {sorted(resolves)}, table says {row[2]}"
        )


def test_pairing_rows_are_contiguous_and_ordered():
    for (_, last, *_), (first, *_) in zip(_detect.PAIRING, _detect.PAIRING[1:], strict=False):
        assert V(last) < V(first)


def test_loader_and_tvm_ffi_pin_match_metadata(surfaces):
    for version, data in surfaces.items():
        row = _detect.pairing_for(version)
        assert row[3] == data["loader"], version
        pins = [r.split("==")[1] for r in data["requires_dist"] if r.startswith("apache-tvm-ffi")]
        assert (pins[0] if pins else None) == row[4], version
        assert ("libtvm_ffi.so" in data["linked_libs"]) == (row[3] == "tvm_ffi"), version


def test_recommended_installs_pair_with_their_torch():
    for minor, dg in _detect.RECOMMENDED.items():
        assert minor in _detect.pairing_for(dg)[2]


def resolve(data: dict, op: str) -> str | None:
    names = set(data["functions"]) | set(data["aliases"]) | set(data["utils_layout_functions"])
    for cand in _surface.RENAMES[op]:
        if cand.startswith("_C."):
            if cand[3:] in data["c_symbols"]:
                return cand
        elif cand in names:
            return cand
    return None


def test_every_release_serves_the_facade_ops(surfaces):
    for version, data in surfaces.items():
        for op in (
            "paged_mqa_logits",
            "mqa_logits",
            "paged_mqa_logits_metadata",
            "fp8_gemm_nt",
            "grouped_gemm_contiguous",
            "grouped_gemm_masked",
            "get_num_sms",
            "set_num_sms",
        ):
            assert resolve(data, op), f"{version} lacks {op}"


def test_pdl_switch_history(surfaces):
    for version, data in surfaces.items():
        got = resolve(data, "set_pdl")
        if V(version) >= V("0.1.4"):
            assert got == "set_pdl", version
        elif V(version) >= V("0.1.1"):
            assert got == "_C.set_pdl", version
        else:
            assert got is None, version


def test_compile_mode_exists_in_no_wheel(surfaces):
    for data in surfaces.values():
        assert (
            resolve(data, "set_compile_mode") is None and resolve(data, "get_compile_mode") is None
        )


def test_0_2_5_removed_the_fp8_only_logits(surfaces):
    for version, data in surfaces.items():
        has = "fp8_paged_mqa_logits" in data["functions"]
        assert has == (V(version) < V("0.2.5")), version
        assert ("fp8_mqa_logits" in data["functions"]) == has
    new = surfaces["0.2.5"]["functions"]["fp8_fp4_paged_mqa_logits"]["params"]
    assert "clean_logits" not in [p["name"] for p in new]


def test_bare_q_scale_constructor_fixed_in_0_2_0(surfaces):
    for version, data in surfaces.items():
        broken = data["scale_ctor"] == "torch.Tensor"
        assert broken == (V(version) < _surface.FP8_FP4_PLAIN_Q_FROM), version


def test_contiguous_layout_param_and_insertion(surfaces):
    for version, data in surfaces.items():
        names = [
            p["name"] for p in data["functions"]["m_grouped_fp8_fp4_gemm_nt_contiguous"]["params"]
        ]
        assert names[3] == "grouped_layout" and "m_indices" not in names
        assert ("ensure_zero_padding" in names) == (
            V(version) >= V(_surface.ADDED_IN["ensure_zero_padding"])
        )


def test_masked_gemm_has_no_overlap_keywords_and_returns_nothing(surfaces):
    for version, data in surfaces.items():
        names = [p["name"] for p in data["functions"]["m_grouped_fp8_fp4_gemm_nt_masked"]["params"]]
        assert not set(_surface.OVERLAP_KEYWORDS) & set(names), version
        schema = data["c_schemas"].get("m_grouped_fp8_fp4_gemm_nt_masked")
        if schema:
            assert schema.endswith("-> ()")


def test_real_installed_module_matches_its_fixture_entry(surfaces):
    """The import that works on this machine: the real wheel's signatures equal the fixture's."""
    from deepgemm_compat import _load

    env = _detect.collect(check_symbols=False)
    if env.deep_gemm_version not in surfaces:
        pytest.skip(f"installed sgl-deep-gemm {env.deep_gemm_version} is not in the fixture")
    module = _load.load(force=True)
    try:
        data = surfaces[env.deep_gemm_version]
        for name, spec in data["functions"].items():
            if name.startswith("_") or not callable(getattr(module, name, None)):
                continue
            real = [
                (p.name, str(p.kind).split(".")[-1].lower())
                for p in inspect.signature(getattr(module, name)).parameters.values()
            ]
            assert real == [(p["name"], p["kind"]) for p in spec["params"]], name
        s = _surface.surface()
        assert s.version == V(env.deep_gemm_version)
        assert s.which("paged_mqa_logits") == resolve(data, "paged_mqa_logits")
    finally:
        _load.use_module(None)
