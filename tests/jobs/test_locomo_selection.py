"""`earm locomo --conversations 26,30 --limit N`: what a quick run keeps."""

from __future__ import annotations

import pytest

from earm_jax.locomo.data import QUERY_CATEGORIES, load_locomo
from earm_jax.locomo.selection import select_conversations


def test_conversations_by_id_in_file_order_and_first_questions(locomo_path):
    everything = load_locomo(locomo_path)
    chosen = select_conversations(everything, ("30", "26"), limit=5)
    assert [c.sample_id for c in chosen] == ["26", "30"]  # file order
    for conversation in chosen:
        queries = conversation.queries()
        assert len(queries) == 5
        original = next(c for c in everything if c.sample_id == conversation.sample_id)
        assert queries == original.queries()[:5]
        assert all(q.category in QUERY_CATEGORIES for q in queries)
    assert select_conversations(everything) == everything


def test_conv_prefix_matches_and_unknown_ids_are_listed(locomo_path):
    everything = load_locomo(locomo_path / "26.json")
    renamed = [type(c)(**{**c.__dict__, "sample_id": "conv-26"}) for c in everything]
    assert select_conversations(renamed, ("26",))[0].sample_id == "conv-26"
    with pytest.raises(ValueError, match="no conversation 99 in the data; it has 26"):
        select_conversations(renamed, ("99",))
