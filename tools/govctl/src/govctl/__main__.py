"""``python -m govctl``: the ``govctl`` console script, for an environment without its entry
point (the pre-commit hook runs it so: see ``.pre-commit-hooks.yaml``)."""

import sys

from govctl.cli import main

sys.exit(main())
