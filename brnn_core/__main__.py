"""`python -m brnn_core ...`: see brnn_core.cli."""

import sys

from brnn_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
