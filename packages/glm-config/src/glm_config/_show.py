"""``glm-config show``: DSA/IndexCache settings in config.json, as loaded, as they should be."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexcache import schedule_savings

from glm_config._files import read_config_json
from glm_config._normalize import MISSING, NormalizeReport, normalize
from glm_config._releases import Defect, defects_for, transformers_version
from glm_config._settings import SHOWN_FIELDS, DsaSettings, expected_settings, fs_pattern, is_dsa
from glm_config._validate import file_errors, summary
from glm_config.errors import ConfigFileError


@dataclass
class Row:
    """One field: its value in config.json, in the loaded config, and what it should be."""

    name: str
    file: Any
    loaded: Any
    expected: Any
    status: str  # "ok", "repair" (normalize fixes it), "differs", or "-" (not loaded)


@dataclass
class ShowResult:
    path: Path
    settings: DsaSettings
    transformers_version: str | None
    load_error: str | None
    defects: tuple[Defect, ...]
    report: NormalizeReport | None
    rows: list[Row] = field(default_factory=list)

    @property
    def needs_repair(self) -> bool:
        return self.report is not None and self.report.changed


def load_with_transformers(model_dir: Path) -> tuple[Any | None, str | None]:
    """``AutoConfig.from_pretrained(model_dir)`` (local files only, no remote code), or why not."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return None, "transformers is not installed (pip install 'glm-config[transformers]')"
    try:
        return AutoConfig.from_pretrained(str(model_dir), local_files_only=True), None
    except Exception as exc:  # unknown model_type in older releases, malformed fields, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return (
            None,
            f"transformers {transformers_version()} cannot load it: {type(exc).__name__}: {first}",
        )


def inspect(model_dir: str | Path) -> ShowResult:
    """Read config.json, load it with the installed transformers, compare with what it should be.

    Raises:
        ConfigFileError: config.json cannot be read, or has errors (all listed, one line), which
            are checked before transformers is imported or handed the file.
        NotDsaError: not a DSA model.
    """
    path, raw, text = read_config_json(model_dir)
    if is_dsa(raw) and (errors := file_errors(raw, text)):
        raise ConfigFileError(f"{path} has {summary(errors)}")
    want = expected_settings(raw, source=str(path))
    loaded, error = load_with_transformers(path.parent)
    version = transformers_version()
    report = normalize(loaded, raw, dry_run=True) if loaded is not None else None
    result = ShowResult(path, want, version, error, defects_for(version, want.model_type), report)
    repaired = {c.field for c in report.changes} if report else set()
    expected = {
        **{k: raw.get(k, MISSING) for k in SHOWN_FIELDS},
        "qk_head_dim": want.qk_head_dim if want.qk_head_dim is not None else MISSING,
        "indexer_types": want.indexer_types,
    }
    for name in SHOWN_FIELDS:
        now = MISSING if loaded is None else getattr(loaded, name, MISSING)
        if loaded is None:
            status = "-"
        elif name in repaired:
            status = "repair"
        elif _equal(now, expected[name]) or (expected[name] is MISSING and name != "indexer_types"):
            status = "ok"
        elif name == "indexer_types" and now is MISSING:
            status = "ok"  # readers derive it from the index_topk_* fields
        else:
            status = "differs"
        result.rows.append(Row(name, raw.get(name, MISSING), now, expected[name], status))
    return result


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b or (a is None and b is MISSING) or (a is MISSING and b is None)


def fmt(value: Any) -> str:
    if value is MISSING:
        return "(unset)"
    if (pattern := fs_pattern(value)) is not None:
        return f"{pattern[:12]}... ({pattern.count('F')} full)"
    return "null" if value is None else str(value)


def render_text(r: ShowResult) -> str:
    s = r.settings.schedule
    loaded_head = (
        f"loaded (transformers {r.transformers_version})" if r.transformers_version else "loaded"
    )
    lines = [
        f"{r.path}: {r.settings.model_type}, {s.num_layers} layer{'' if s.num_layers == 1 else 's'}"
        + (f" + {s.num_nextn_layers} NextN" if s.num_nextn_layers else ""),
    ]
    for d in r.defects:
        lines.append(f"  transformers {r.transformers_version} {d.summary} ({d.releases})")
    table = [("field", "config.json", loaded_head, "should be", "")]
    table += [
        (
            x.name,
            fmt(x.file),
            fmt(x.loaded) if x.status != "-" else "-",
            fmt(x.expected),
            "" if x.status in ("ok", "-") else x.status.upper(),
        )
        for x in r.rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    lines += [
        "",
        *(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table
        ),
        "",
    ]
    saved = schedule_savings(s).saved_fraction
    lines.append(
        f"IndexCache: {s.num_full} of {s.num_layers} layer{'' if s.num_layers == 1 else 's'} "
        f"{'runs' if s.num_full == 1 else 'run'} the indexer ({s.source}); "
        f"indexer FLOPs saved {100 * saved:.1f}%"
    )
    if r.settings.conflict:
        lines.append(f"warning: {r.settings.conflict}")
    if r.load_error:
        lines.append(f"not loaded: {r.load_error}")
    elif r.needs_repair:
        assert r.report is not None
        n = len(r.report.changes)
        lines.append(
            f"{n} field{'s need' if n != 1 else ' needs'} repair as loaded; "
            f"glm_config.normalize(config, raw) repairs {'them' if n != 1 else 'it'} at load time "
            f"(the sglang-integration plugin calls it)."
        )
    else:
        lines.append("the loaded config matches config.json")
    return "\n".join(lines)


def render_json(r: ShowResult) -> dict[str, Any]:
    def j(v: Any) -> Any:
        return None if v is MISSING else list(v) if isinstance(v, tuple) else v

    s = r.settings.schedule
    return {
        "path": str(r.path),
        "model_type": r.settings.model_type,
        "num_layers": s.num_layers,
        "num_nextn_layers": s.num_nextn_layers,
        "transformers": r.transformers_version,
        "defects": [d.name for d in r.defects],
        "load_error": r.load_error,
        "fields": {
            x.name: {
                "config_json": j(x.file),
                "loaded": j(x.loaded),
                "expected": j(x.expected),
                "status": x.status,
            }
            for x in r.rows
        },
        "schedule": {"source": s.source, "pattern": s.pattern, "full_layers": list(s.full_layers)},
        "needs_repair": r.needs_repair,
        "conflict": r.settings.conflict,
    }
