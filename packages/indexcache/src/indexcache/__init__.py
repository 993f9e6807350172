"""IndexCache: share the lightning indexer top-k across DSA layers (schedule, gate, carry)."""

from indexcache._flops import IndexerDims, Savings, indexer_flops, schedule_savings
from indexcache._gate import TopkCarry, check_two_batch_overlap, should_run_indexer
from indexcache._indexer import causal_window, indexer_logits, indexer_topk, lightning_indexer
from indexcache._limits import MAX_LAYERS
from indexcache._schedule import IndexerSchedule, schedule_from_config
from indexcache.errors import (
    CarryError,
    IncompatibleOptionError,
    IndexCacheError,
    IndexerInputError,
    ScheduleError,
)

__version__ = "0.1.0"

# Grouped by topic (house style), not alphabetically.
__all__ = [  # noqa: RUF022
    # Schedule
    "IndexerSchedule",
    "schedule_from_config",
    "MAX_LAYERS",
    # Gate and carry
    "TopkCarry",
    "should_run_indexer",
    "check_two_batch_overlap",
    # Reference indexer
    "causal_window",
    "indexer_logits",
    "indexer_topk",
    "lightning_indexer",
    # FLOPs
    "IndexerDims",
    "Savings",
    "indexer_flops",
    "schedule_savings",
    # Errors
    "IndexCacheError",
    "ScheduleError",
    "IncompatibleOptionError",
    "IndexerInputError",
    "CarryError",
]
