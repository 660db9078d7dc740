"""The ``>>>`` examples in the docstrings run (optax style: docs that cannot rot).

Modules are discovered by walking the package: every module whose source holds
an example is collected, so a new example is tested without editing this file.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import earm_jax

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def _modules_with_examples() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(earm_jax.__path__, prefix="earm_jax."):
        spec = importlib.util.find_spec(info.name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        if ">>> " in Path(spec.origin).read_text(encoding="utf-8"):
            found.append(info.name)
    return sorted(found)


MODULES = _modules_with_examples()


def test_examples_are_discovered():
    # The discovery itself must find the documented core modules.
    assert {"earm_jax.core.online", "earm_jax.settings"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no doctest"
    assert result.failed == 0
