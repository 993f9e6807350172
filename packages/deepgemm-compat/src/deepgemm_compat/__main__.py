"""``python -m deepgemm_compat``: the ``deepgemm-compat`` console script."""

from deepgemm_compat.cli import main

raise SystemExit(main())
