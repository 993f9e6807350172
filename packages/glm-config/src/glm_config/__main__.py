"""``python -m glm_config``: the ``glm-config`` console script."""

from glm_config.cli import main

raise SystemExit(main())
