"""Where the tests' data lives, importable from any test (``from paths import VECTORS_DIR``): a test module must
not import ``conftest``, because pytest registers every folder's ``conftest.py`` under that one name."""
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = Path(os.environ.get("FXPSIM_VECTORS", REPO_ROOT / "tests" / "vectors"))
