"""Fixtures of the RTL tests: a test parametrized with ``sim="verilator"`` runs with the environment that points
cocotb's Verilator runner at a Verilator new enough for it (:func:`verilator_env.verilator_env`)."""
import pytest

from verilator_env import verilator_env


@pytest.fixture(autouse=True)
def _simulator_env(request, monkeypatch):
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("sim") == "verilator":
        env, _ = verilator_env()
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
