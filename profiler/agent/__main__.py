"""Entry point for ``python -m profiler.agent``."""

import sys

from profiler.agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
