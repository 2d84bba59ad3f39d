"""`python -m trajgrade`: the same CLI as the `trajgrade` console script."""

from trajgrade.cli import main

raise SystemExit(main())
