"""Find the repository root and read gov/config.toml.

The root is the nearest directory at or above the cwd holding gov/config.toml; without one,
the cwd itself. gov/config.toml (upstream govctl's keys; others are ignored):

    [work_item]
    id_strategy = "random"   # random | author-hash | sequential

    [tags]
    allowed = ["cli", "core"]  # the only tags items may carry; absent or empty: none at all

    [verification]
    enabled = true                      # default_guards apply only when enabled
    default_guards = ["GUARD-TESTS"]    # guards every item requires (gov/guard/*.toml)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from govctl.errors import UsageError

ID_STRATEGIES = ("random", "author-hash", "sequential")


@dataclass(frozen=True)
class Config:
    """Settings read from gov/config.toml.

    Attributes:
        root: repository root (holds gov/).
        id_strategy: how `work new` picks IDs; see `_ids`.
        tags_allowed: `[tags] allowed`; None when there is no gov/config.toml at all (then any
            tag of the right shape passes). With a config file, a missing list allows no tag,
            as upstream govctl does.
        default_guards: `[verification] default_guards` when `enabled`, else empty.
    """

    root: Path
    id_strategy: str = "random"
    tags_allowed: frozenset[str] | None = None
    default_guards: tuple[str, ...] = ()

    @property
    def gov(self) -> Path:
        return self.root / "gov"

    @property
    def work_dir(self) -> Path:
        return self.gov / "work"


def find_root(start: Path) -> Path:
    """The nearest directory at or above `start` with gov/config.toml, else `start`."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / "gov" / "config.toml").is_file():
            return d
    return start


def require_root(start: Path) -> Path:
    """`find_root(start)`, which must hold gov/config.toml: authoring needs a repository.

    Without this, `work new` run anywhere would create ./gov/work there.
    """
    root = find_root(start)
    if not (root / "gov" / "config.toml").is_file():
        raise UsageError(
            f"no gov/config.toml in {start.resolve()} or above: run govctl work inside a "
            "repository (create gov/config.toml at its root to start one)"
        )
    return root


def load_config(root: Path) -> Config:
    """Read root/gov/config.toml (defaults when absent); UsageError on a bad file."""
    path = root / "gov" / "config.toml"
    if not path.is_file():
        return Config(root=root)
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read config: {exc}") from exc
    strategy = _table(data, "work_item", path).get("id_strategy", "random")
    if strategy not in ID_STRATEGIES:
        raise UsageError(
            f"{path}: [work_item] id_strategy = {strategy!r}; expected one of "
            f"{', '.join(ID_STRATEGIES)}"
        )
    allowed = _strings(_table(data, "tags", path), "allowed", path)
    verification = _table(data, "verification", path)
    enabled = verification.get("enabled", False)
    if not isinstance(enabled, bool):
        raise UsageError(f"{path}: [verification] enabled = {enabled!r}; expected true or false")
    guards = _strings(verification, "default_guards", path) if enabled else ()
    return Config(
        root=root, id_strategy=strategy, tags_allowed=frozenset(allowed), default_guards=guards
    )


def _table(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    t = data.get(name, {})
    if not isinstance(t, dict):
        raise UsageError(f"{path}: '{name}' must be a table: write [{name}]")
    return t


def _strings(table: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    v = table.get(key, [])
    if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
        raise UsageError(f"{path}: '{key}' = {v!r}; expected a list of strings")
    return tuple(v)
