"""`python -m brnn_core ...`: see brnn_core.cli."""

import sys

from .threads import apply_openmp_env

apply_openmp_env()  # before anything imports torch: libgomp reads its wait settings once, when it loads

from .cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
