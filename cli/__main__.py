"""`python -m cli ...`: the `noderoll` console script without the installed entry point."""

import sys

from cli.main import main

sys.exit(main())
