"""`python -m benchmarks` from the repository root (`make bench`): the benchmark suite (benchmarks/harness)."""

import sys

from benchmarks.harness.suite import main

if __name__ == "__main__":
    sys.exit(main())
