"""Diagnostic codes, the `Diagnostic` record and the `CheckResult` a `Checker` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

# code -> (level, one-line summary). The govctl README carries the same table; a test keeps
# the two in sync. E0xx: one file; E02x: across files; Wxxx: warnings (errors with -W).
CODES: dict[str, tuple[str, str]] = {
    "E001": ("error", "TOML syntax error"),
    "E002": ("error", 'unquoted TOML date/time; dates are quoted strings "YYYY-MM-DD"'),
    "E003": ("error", "file cannot be read (I/O error or not UTF-8)"),
    "E004": ("error", "required key missing"),
    "E005": ("error", "unknown key (the schema has additionalProperties: false)"),
    "E006": ("error", "value has the wrong type"),
    "E007": ("error", "value not allowed (enum/const)"),
    "E008": ("error", 'not a valid calendar date "YYYY-MM-DD"'),
    "E009": ("error", "ID, ref, guard or tag does not match its pattern"),
    "E010": ("error", "other schema constraint (empty string, repeated list item)"),
    "E011": (
        "error",
        "status needs a date that is missing (active/done: started; done/cancelled: completed)",
    ),
    "E012": ("error", "dates out of order (created <= started <= completed)"),
    "E013": ("error", "status forbids a date (queue: no started/completed; active: no completed)"),
    "E014": ("error", "status done without any acceptance criterion"),
    "E015": ("error", "status done with a criterion still pending"),
    "E016": ("error", "journal date outside created..completed"),
    "E017": ("error", "file name does not start with the ID's date (YYYY-MM-DD-slug.toml)"),
    "E018": ("error", "tag not in gov/config.toml [tags] allowed (no list there: no tag allowed)"),
    "E019": ("error", "waiver for a guard the item does not require"),
    "E020": ("error", "duplicate work item ID"),
    "E021": ("error", "refs/depends_on entry does not resolve"),
    "E022": ("error", "[[ID]] link in text does not resolve"),
    "E023": ("error", "depends_on cycle (one diagnostic per elementary cycle)"),
    "E024": ("error", "required or waived guard is not defined in gov/guard/"),
    "W001": ("warning", "placeholder description"),
    "W002": ("warning", "first line is not the `#:schema ../schema/work.schema.json` directive"),
    "W003": ("warning", "done item depends on an item that is not done"),
    "W004": ("warning", "unfinished item mentions an existing artifact ID without [[...]]"),
}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem, located at the line of the offending key.

    Attributes:
        level: "error" or "warning".
        code: a key of `CODES`, e.g. "E012".
        message: what is wrong and, where it helps, how to fix it.
        file: the path as shown to the user (relative to the cwd when below it).
        line: 1-based line of the offending key (of the table header when the key is missing).
    """

    level: str
    code: str
    message: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.level}[{self.code}]: {self.message} ({self.file}:{self.line})"

    def as_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "code": self.code,
            "message": self.message,
            "file": self.file,
            "line": self.line,
        }


def diag(code: str, message: str, file: str, line: int) -> Diagnostic:
    """Build a `Diagnostic` whose level comes from `CODES`."""
    return Diagnostic(CODES[code][0], code, message, file, line)


@dataclass
class CheckResult:
    """What a `Checker` found: the diagnostics, sorted by file then line, and a file count."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    files_checked: int = 0

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "warning"]

    def exit_code(self, *, deny_warnings: bool = False) -> int:
        """0 when clean, 1 on errors (or on warnings when `deny_warnings`)."""
        if self.errors or (deny_warnings and self.warnings):
            return 1
        return 0
