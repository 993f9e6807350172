"""``python -m cpkv_validate``: the ``cpkv-validate`` console script (for a box without it)."""

from cpkv_validate.cli import main

raise SystemExit(main())
