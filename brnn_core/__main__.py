"""`python -m brnn_core ...`: see brnn_core.cli."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
