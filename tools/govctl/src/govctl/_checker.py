"""`Checker`: load files, run the schema, the per-file rules and the cross-file rules."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from govctl._config import load_config
from govctl._diagnostics import CheckResult, Diagnostic
from govctl._links import Artifacts, cross_file
from govctl._load import WorkFile, load, shown_path
from govctl._policy import rule_guards_exist, rule_tags, rule_waivers
from govctl._rules import RULES
from govctl._schema import BUNDLED_SCHEMA, load_schema


class Checker:
    """Check work item files.

    Args:
        files: the files to report on.
        root: repository root; its gov/ supplies the schema (else the bundled copy), the policy
            in gov/config.toml (tag vocabulary, default guards), the RFC/ADR/guard artifacts
            refs resolve against, and gov/work items used as context.
        cwd: paths in diagnostics are shown relative to it.
        overrides: path -> text to check instead of the file's content (a pending write).
    """

    def __init__(
        self,
        files: Iterable[Path],
        *,
        root: Path,
        cwd: Path | None = None,
        overrides: Mapping[Path, str] | None = None,
    ) -> None:
        # absolute, not resolved: resolving symlinks costs a syscall per path component
        self.files = sorted({Path(os.path.abspath(p)) for p in files})
        self.root = Path(os.path.abspath(root))
        self.cwd = Path(os.path.abspath(cwd or Path.cwd()))
        self.overrides = {Path(os.path.abspath(p)): t for p, t in (overrides or {}).items()}

    def _load(self, path: Path) -> WorkFile:
        return load(path, shown_path(path, self.cwd), self.overrides.get(path))

    def context_files(self) -> list[Path]:
        """Other items of root/gov/work when any checked file lives there."""
        work = self.root / "gov" / "work"
        if not any(p.parent == work for p in self.files):
            return []
        mine = set(self.files)
        extra = set(work.glob("*.toml")) | {p for p in self.overrides if p.parent == work}
        return sorted(p for p in extra if p not in mine)

    def run(self) -> CheckResult:
        """Check everything; never raises for bad file content (UsageError for a bad config)."""
        schema_path = self.root / "gov" / "schema" / "work.schema.json"
        schema = load_schema(schema_path if schema_path.is_file() else BUNDLED_SCHEMA)
        cfg = load_config(self.root)
        artifacts = Artifacts(self.root / "gov")
        checked = [self._load(p) for p in self.files]
        context = [self._load(p) for p in self.context_files()]
        diags: list[Diagnostic] = []
        for wf in checked:
            diags.extend(wf.problems)
            if wf.doc is None:
                continue
            diags.extend(schema.check(wf))
            for rule in RULES:
                diags.extend(rule(wf))
            diags.extend(rule_tags(wf, cfg))
            diags.extend(rule_waivers(wf, cfg))
            diags.extend(rule_guards_exist(wf, artifacts))
        diags.extend(cross_file(checked, context, artifacts))
        order = {wf.shown: i for i, wf in enumerate(checked)}
        diags.sort(key=lambda d: (order.get(d.file, len(order)), d.line, d.code, d.message))
        return CheckResult(diagnostics=diags, files_checked=len(checked))
