"""``python -m ctxkeep.cli``: the same as the ``ctxkeep`` console script."""

from ctxkeep.cli import main

raise SystemExit(main())
