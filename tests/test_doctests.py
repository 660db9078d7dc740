"""The ``>>>`` examples in the docstrings run (optax style: docs that cannot rot)."""

from __future__ import annotations

import doctest
import importlib

import pytest

# simulate.py's example runs eagerly (tens of seconds on 2 cores); it is covered
# by tests/test_simulate.py instead.
MODULES = [
    "earm_jax.solver",
    "earm_jax.policies.budget",
    "earm_jax.stats",
    "earm_jax.metrics",
    "earm_jax.sharding",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no doctest"
    assert result.failed == 0
