"""The durable retriever refuses the adaptive preset instead of ignoring it."""

from __future__ import annotations

import pytest

from earm_jax.retriever import RetrieverConfig


def test_best_preset_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="RetrieverConfig.preset='best' is not"):
        RetrieverConfig(preset="best")
