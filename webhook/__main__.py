"""`python -m webhook`: `noderoll webhook` without the CLI's other commands (the local stack runs it so)."""

import sys

from webhook.command import main

sys.exit(main())
