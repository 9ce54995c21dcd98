"""``python -m fxpsim``: the command line (see :mod:`fxpsim.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
