"""Shared pytest configuration: hypothesis profiles and the reference-vector directory.

Hypothesis profiles: ``ci`` (default; 60 examples, derandomized, no deadline) and
``thorough`` (2000 examples, derandomized too: CI runs are reproducible); pick one with ``HYPOTHESIS_PROFILE=thorough pytest``.

Reference vectors live in ``tests/vectors`` (committed, see its README for the tool and version that
produced each file); ``FXPSIM_VECTORS`` may name another directory with the same files.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO_ROOT = Path(__file__).resolve().parent.parent
# ``from reference import ...`` works whatever pytest's import mode.
if str(REPO_ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "tests"))
from paths import VECTORS_DIR  # noqa: E402


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """Directory of the reference vectors; a missing directory is a failure, never a skip."""
    assert VECTORS_DIR.is_dir(), f"reference vectors not found at {VECTORS_DIR}"
    return VECTORS_DIR
