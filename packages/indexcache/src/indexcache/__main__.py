"""``python -m indexcache``: the ``indexcache`` console script."""

from indexcache.cli import main

raise SystemExit(main())
