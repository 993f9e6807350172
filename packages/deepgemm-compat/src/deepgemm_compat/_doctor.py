"""``deepgemm-compat doctor``: everything about the installed sgl-deep-gemm, one fix per finding."""

from __future__ import annotations

import os
import platform

from deepgemm_compat import _detect
from deepgemm_compat._kernel_pkg import find_kernel_package
from deepgemm_compat._pdl import PDL_ENV, pdl_from_env


def _try_import() -> dict:
    from deepgemm_compat import _load
    from deepgemm_compat._surface import RENAMES, surface
    from deepgemm_compat.errors import DeepGemmUnavailable

    try:
        _load.load()
    except DeepGemmUnavailable as exc:
        return {
            "ok": False,
            "error": type(exc).__name__,
            "message": str(exc).split("\n")[0],
            "fix": exc.fix,
        }
    s = surface()
    out: dict = {
        "ok": True,
        "version": str(s.version),
        "resolved": {op: s.which(op) for op in RENAMES},
    }
    try:
        import torch

        out["cuda_device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception as exc:  # a broken driver must not hide the rest of the report
        out["cuda_device"] = f"error: {exc}"
    return out


def report(do_import: bool = True) -> dict:
    """The doctor report as a dict (``--format json`` prints exactly this)."""
    env = _detect.collect(check_symbols=True)
    problems = _detect.diagnose(env)
    row = _detect.pairing_for(env.deep_gemm_version) if env.deep_gemm_version else None
    kernel = find_kernel_package()
    doc = {
        "python": platform.python_version(),
        "environment": env.to_dict(),
        "loader": _detect.loader_kind(env.deep_gemm_version),
        "pairing": None
        if row is None
        else {
            "releases": f"{row[0]} - {row[1]}",
            "torch": list(row[2]),
            "tvm_ffi_pin": row[4],
        },
        "recommended_install": _detect.install_line(env.torch_version),
        "kernel_package": {
            "name": kernel.name,
            "version": kernel.version,
            "minimum": kernel.minimum,
            "ok": kernel.ok,
        },
        "pdl_env": os.environ.get("SGLANG_DEEPGEMM_PDL", "(unset: on)"),
        "problems": [p.__dict__ for p in problems],
        "import": None,
    }
    try:
        pdl_from_env()
    except ValueError as exc:  # apply_pdl would raise the same
        doc["problems"].append(
            {
                "code": "pdl-env",
                "message": f"{exc}; deepgemm_compat.apply_pdl refuses it",
                "blocking": False,
                "fix": f"set {PDL_ENV}=1 or {PDL_ENV}=0, or unset it (on)",
            }
        )
    if not kernel.ok:
        doc["problems"].append(
            {
                "code": "kernel-package",
                "message": kernel.message,
                "blocking": False,
                "fix": f'pip install "sglang-kernel>={kernel.minimum}"',
            }
        )
    if do_import and not any(p.blocking for p in problems):
        doc["import"] = _try_import()
        imp = doc["import"]
        if not imp["ok"]:
            doc["problems"].append(
                {"code": "import", "message": imp["message"], "fix": imp["fix"], "blocking": True}
            )
        elif not imp.get("cuda_device") or str(imp["cuda_device"]).startswith("error"):
            doc["problems"].append(
                {
                    "code": "no-cuda",
                    "blocking": True,
                    "message": f"deep_gemm {imp['version']} imports, but torch sees no CUDA device "
                    f"({imp.get('cuda_device') or 'none'}); every kernel call would fail",
                    "fix": "run on a GPU host (check nvidia-smi and CUDA_VISIBLE_DEVICES)",
                }
            )
    doc["ok"] = not any(p["blocking"] for p in doc["problems"])
    return doc


def render_text(doc: dict) -> str:
    env = doc["environment"]
    lines = [
        "deepgemm-compat doctor",
        f"  sgl-deep-gemm   {env['deep_gemm_version'] or 'not installed'}"
        f"  (loader: {doc['loader'] or '?'}; provided by {', '.join(env['providers']) or '-'})",
        f"  torch           {env['torch_version'] or 'not installed'}",
        f"  apache-tvm-ffi  {env['tvm_ffi_version'] or 'not installed'}",
    ]
    if doc["pairing"]:
        p = doc["pairing"]
        tvm = f", apache-tvm-ffi=={p['tvm_ffi_pin']}" if p["tvm_ffi_pin"] else ""
        lines.append(
            f"  pairing         releases {p['releases']} load with torch "
            f"{'/'.join(p['torch'])}{tvm}"
        )
    sym = env["missing_symbols"]
    lines.append(
        "  torch symbols   "
        + (
            "not checked"
            if sym is None
            else "all resolve"
            if not sym
            else f"{len(sym)} missing: {', '.join(sym[:3])}"
        )
    )
    k = doc["kernel_package"]
    lines.append(
        f"  kernel package  {k['name'] or 'none'} {k['version'] or ''} (minimum {k['minimum']})"
    )
    lines.append(f"  PDL             SGLANG_DEEPGEMM_PDL={doc['pdl_env']}")
    imp = doc["import"]
    if imp and imp["ok"]:
        lines.append(f"  import          ok; CUDA device: {imp.get('cuda_device') or 'none'}")
        for op, sym_name in imp["resolved"].items():
            lines.append(f"    {op:<26} -> {sym_name or '(absent)'}")
    lines.append(f"  install line    {doc['recommended_install']}")
    if not doc["problems"]:
        lines.append("no problems found")
    for p in doc["problems"]:
        level = "error" if p["blocking"] else "warning"
        lines.append(f"{level}[{p['code']}]: {p['message']}\n  fix: {p['fix']}")
    return "\n".join(lines)
