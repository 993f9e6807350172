"""Find the repository root and read gov/config.toml.

The root is the nearest directory at or above the cwd holding gov/config.toml; without one,
the cwd itself. gov/config.toml (upstream-compatible keys):

    [work_item]
    id_strategy = "random"   # random | author-hash | sequential
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from govctl.errors import UsageError

ID_STRATEGIES = ("random", "author-hash", "sequential")


@dataclass(frozen=True)
class Config:
    """Settings read from gov/config.toml.

    Attributes:
        root: repository root (holds gov/).
        id_strategy: how `work new` picks IDs; see `_ids`.
    """

    root: Path
    id_strategy: str = "random"

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
    work = data.get("work_item", {})
    strategy = work.get("id_strategy", "random") if isinstance(work, dict) else None
    if strategy not in ID_STRATEGIES:
        raise UsageError(
            f"{path}: [work_item] id_strategy = {strategy!r}; expected one of "
            f"{', '.join(ID_STRATEGIES)}"
        )
    return Config(root=root, id_strategy=strategy)
