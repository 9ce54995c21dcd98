"""``python -m fxpsim``: the command line (see :mod:`fxpsim.cli`)."""
import sys

from .cli import main

sys.exit(main())
