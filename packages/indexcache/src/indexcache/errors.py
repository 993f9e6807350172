"""Exceptions raised by indexcache.

```
IndexCacheError
 ├── ScheduleError(ValueError)          a pattern, indexer_types list, freq, offset or count is
 │                                      invalid or past its bound (indexcache._limits)
 ├── IncompatibleOptionError(ValueError) a serving option cannot run with the schedule
 ├── IndexerInputError(ValueError)      a tensor given to the reference indexer is malformed
 └── CarryError(RuntimeError)           a reusing layer found no (or the wrong) carried top-k
```
Every message names the field or tensor, what was expected, what was found, and the fix.
"""

from __future__ import annotations


class IndexCacheError(Exception):
    """Base class of every indexcache error."""


class ScheduleError(IndexCacheError, ValueError):
    """The per-layer indexer schedule cannot be built from the given settings."""


class IncompatibleOptionError(IndexCacheError, ValueError):
    """A serving option (e.g. two-batch overlap) cannot run with this schedule."""


class IndexerInputError(IndexCacheError, ValueError):
    """A tensor passed to the reference indexer has the wrong shape, dtype or device."""


class CarryError(IndexCacheError, RuntimeError):
    """A layer that must reuse a carried top-k found none, or one from the wrong layer."""
