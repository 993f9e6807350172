"""Extract the Python surface of every sgl-deep-gemm wheel into a JSON fixture.

The CPU tests build stand-in ``deep_gemm`` modules from this fixture (the real wheels
need CUDA to import), so every signature they see is read from a published wheel,
never typed by hand. Nothing from the wheels is copied except names, parameter lists,
defaults and a few booleans about the code (does the wrapper return, does it build a
scale with the broken ``torch.Tensor(..., dtype=)`` call).

Get the wheels (they are ``py3-none-manylinux2014_x86_64``, one per version)::

    for v in $(pip index versions sgl-deep-gemm | sed -n 's/Available versions: //p' | tr -d ,); do
        pip download --no-deps --only-binary=:all: sgl-deep-gemm==$v -d /tmp/dgw
    done

Optionally, for the torch ABI pairing, unpack ``torch/lib/lib{torch,torch_cpu,torch_cuda,
c10,c10_cuda}.so`` of each torch release into ``DIR/<version>/`` and pass ``--torch-libs DIR``.

Run::

    cd packages/deepgemm-compat
    PYTHONPATH=src python3 scripts/gen_surfaces.py /tmp/dgw --torch-libs /tmp/torchlibs \\
        -o tests/fixtures/surfaces.json
"""

from __future__ import annotations

import argparse
import ast
import email.parser
import json
import re
import tempfile
import zipfile
from pathlib import Path

from deepgemm_compat._elf import TORCH_LIBS, dynamic_symbols, torch_symbols
from packaging.version import Version


def _params(fn: ast.FunctionDef) -> list[dict]:
    a = fn.args
    out: list[dict] = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(positional, defaults, strict=True):
        kind = "positional_only" if arg in a.posonlyargs else "positional_or_keyword"
        out.append(_param(arg.arg, kind, d))
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "var_positional"})
    for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append(_param(arg.arg, "keyword_only", d))
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "var_keyword"})
    return out


def _param(name: str, kind: str, default: ast.expr | None) -> dict:
    p = {"name": name, "kind": kind}
    if default is not None:
        p["default"] = ast.unparse(default)
    return p


def _c_calls(fn: ast.FunctionDef) -> list[str]:
    """Names of ``_C.<name>(...)`` / ``_get_C().<name>(...)`` calls in a wrapper body."""
    names = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            is_c = isinstance(base, ast.Name) and base.id == "_C"
            is_get_c = isinstance(base, ast.Call) and getattr(base.func, "id", "") == "_get_C"
            if is_c or is_get_c:
                names.append(node.func.attr)
    return sorted(set(names))


def _parsed_args(fn: ast.FunctionDef) -> list[str]:
    """Parameters routed through ``_parse_tensor_or_tuple`` (a plain tensor gets a scale)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_parse_tensor_or_tuple":
            out += [x.id for x in node.args if isinstance(x, ast.Name)]
    return sorted(set(out))


def _returns_value(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))


def _walk_module(body: list[ast.stmt], out: dict) -> None:
    """Top-level defs and aliases, descending into try/if blocks as the module does."""
    for node in body:
        if isinstance(node, ast.FunctionDef):
            out["functions"][node.name] = {
                "params": _params(node),
                "c_calls": _c_calls(node),
                "parses_tensor_or_tuple": _parsed_args(node),
                "returns_value": _returns_value(node),
            }
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                out["aliases"][target.id] = ast.unparse(node.value)
        elif isinstance(node, ast.ImportFrom) and node.level >= 1:
            for alias in node.names:
                out["relative_imports"].append(
                    f"{'.' * node.level}{node.module or ''}:{alias.name}"
                )
        elif isinstance(node, ast.Import):
            out["imports"] += [a.name for a in node.names]
        elif isinstance(node, ast.Try):
            _walk_module(node.body, out)
        elif isinstance(node, ast.If):
            _walk_module(node.body, out)
            _walk_module(node.orelse, out)


def _module_surface(source: str) -> dict:
    out: dict = {"functions": {}, "aliases": {}, "relative_imports": [], "imports": []}
    _walk_module(ast.parse(source).body, out)
    out["imports"] = sorted(set(out["imports"]))
    return out


def _scale_ctor(source: str) -> str:
    """How ``_parse_tensor_or_tuple`` builds the unit scale for a bare tensor."""
    m = re.search(r"scale = (torch\.[Tt]ensor)\(", source)
    return m.group(1) if m else "none"


_SCHEMA = re.compile(r"^([a-z_0-9]+)(\(.*\) -> .*)$")


def _c_symbols(so: Path) -> tuple[list[str], dict[str, str]]:
    """Exported ``_C`` entry points: tvm-ffi ``__tvm_ffi_<name>`` or TORCH_LIBRARY schemas."""
    defined, _ = dynamic_symbols(so)
    tvm = sorted(n.removeprefix("__tvm_ffi_") for n in defined if n.startswith("__tvm_ffi_"))
    schemas: dict[str, str] = {}
    for line in re.findall(rb"[a-z_0-9]+\([\x20-\x7e]*\) -> [\x20-\x7e]+", so.read_bytes()):
        m = _SCHEMA.match(line.decode())
        returns_plain = m and m.group(2).endswith(("()", "-> int", "-> bool"))
        if (m and "Tensor" in m.group(2)) or returns_plain:
            schemas[m.group(1)] = m.group(2)
    return (tvm if tvm else sorted(schemas)), schemas


def _torch_pairing(so: Path, torch_libs: Path | None) -> dict:
    if torch_libs is None:
        return {}
    needed = torch_symbols(dynamic_symbols(so)[1])
    result = {}
    for tdir in sorted(p for p in torch_libs.iterdir() if p.is_dir()):
        provided: set[str] = set()
        for name in TORCH_LIBS:
            if (tdir / name).exists():
                provided |= dynamic_symbols(tdir / name)[0]
        result[tdir.name] = sorted(needed - provided)
    return result


def extract(wheel: Path, torch_libs: Path | None) -> tuple[str, dict]:
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
        root = Path(tmp)
        meta_path = next(root.glob("*.dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(meta_path.read_text())
        version = meta["Version"]
        pkg = root / "deep_gemm"
        init_src = (pkg / "__init__.py").read_text()
        surface = _module_surface(init_src)
        layout = pkg / "utils" / "layout.py"
        utils_surface = _module_surface(layout.read_text()) if layout.exists() else {}
        c_names, schemas = _c_symbols(pkg / "_C.so")
        so_libs = sorted(
            n
            for n in re.findall(rb"lib[a-z_0-9]+\.so(?:\.[0-9]+)?", (pkg / "_C.so").read_bytes())
            if n.startswith(
                (b"libtvm_ffi", b"libtorch", b"libc10", b"libcud", b"libnvrtc", b"libcublas")
            )
        )
        return version, {
            "wheel": wheel.name,
            "requires_dist": sorted(
                r for r in (meta.get_all("Requires-Dist") or []) if "extra ==" not in r
            ),
            "loader": "tvm_ffi" if "tvm_ffi" in surface["imports"] else "torch_library",
            "imports": surface["imports"],
            "linked_libs": sorted({n.decode() for n in so_libs}),
            "scale_ctor": _scale_ctor(init_src),
            "functions": surface["functions"],
            "aliases": surface["aliases"],
            "relative_imports": surface["relative_imports"],
            "utils_layout_functions": utils_surface.get("functions", {}),
            "c_symbols": c_names,
            "c_schemas": schemas,
            "torch_missing_symbols": _torch_pairing(pkg / "_C.so", torch_libs),
        }


def _dump(doc: dict) -> str:
    """JSON with one line per function / schema, so a diff between releases reads well."""
    lines = [
        "{",
        f' "about": {json.dumps(doc["about"])},',
        f' "torch_checked": {json.dumps(doc["torch_checked"])},',
        ' "versions": {',
    ]
    for vi, (version, data) in enumerate(doc["versions"].items()):
        lines.append(f"  {json.dumps(version)}: {{")
        items = list(data.items())
        for ki, (key, value) in enumerate(items):
            comma = "," if ki < len(items) - 1 else ""
            if isinstance(value, dict) and value:
                lines.append(f"   {json.dumps(key)}: {{")
                sub = list(value.items())
                for si, (k, v) in enumerate(sub):
                    sc = "," if si < len(sub) - 1 else ""
                    lines.append(f"    {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}{sc}")
                lines.append(f"   }}{comma}")
            else:
                lines.append(f"   {json.dumps(key)}: {json.dumps(value)}{comma}")
        lines.append("  }" + ("," if vi < len(doc["versions"]) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("wheel_dir", type=Path, help="folder holding sgl_deep_gemm-*.whl")
    ap.add_argument("--torch-libs", type=Path, help="DIR/<torch version>/libtorch*.so ...")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    versions = {}
    for wheel in sorted(args.wheel_dir.glob("sgl_deep_gemm-*.whl")):
        version, data = extract(wheel, args.torch_libs)
        versions[version] = data
        print(f"{version}: {len(data['functions'])} functions, loader={data['loader']}")
    ordered = dict(sorted(versions.items(), key=lambda kv: Version(kv[0])))
    doc = {
        "about": (
            "Generated by scripts/gen_surfaces.py from the sgl-deep-gemm wheels on PyPI. "
            "Facts only (names, signatures, linked symbols); no wheel code."
        ),
        "torch_checked": sorted(p.name for p in args.torch_libs.iterdir())
        if args.torch_libs
        else [],
        "versions": ordered,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_dump(doc))
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB, {len(ordered)} versions)")


if __name__ == "__main__":
    main()
