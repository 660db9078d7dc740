"""Where the tests find LoCoMo, and the rule when it is missing: the test
fails (CI always has the data) unless ``EARM_ALLOW_MISSING_DATA=1`` asks for
a skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def locomo_dir() -> Path:
    """``$EARM_LOCOMO_DATA`` (the variable ``earm locomo`` reads), else
    ``../shared/data/locomo`` next to the repository."""
    configured = os.environ.get("EARM_LOCOMO_DATA")
    if configured:
        return Path(configured)
    return REPO.parent / "shared" / "data" / "locomo"


def require_locomo(folder: Path | None = None) -> Path:
    """``folder`` (default :func:`locomo_dir`) if it holds the data; else the
    test fails, or skips where ``EARM_ALLOW_MISSING_DATA=1``."""
    folder = locomo_dir() if folder is None else folder
    if not folder.is_dir():
        message = (
            f"LoCoMo data not found at {folder} (set EARM_LOCOMO_DATA to a folder "
            "of per-conversation files: the tests read 26.json, 30.json)"
        )
        if os.environ.get("EARM_ALLOW_MISSING_DATA") == "1":
            pytest.skip(message)
        pytest.fail(message)
    return folder
