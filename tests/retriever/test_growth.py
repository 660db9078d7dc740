"""The compiled functions of a shape every retriever grew out of are dropped
(each compiled executable keeps its memory until then); a shape an open
retriever holds, or may still grow into, and the initial shape are kept."""

from __future__ import annotations

import sys
from pathlib import Path

from earm_jax.retriever import OnlineRetriever, compiled
from earm_jax.retriever.compiled import policy_key, solver_config_of

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402


def _compiled(capacity: int) -> bool:
    shape = solver_config_of(CONFIG, CONFIG.initial_memories, capacity)
    return (shape, policy_key(CONFIG)) in compiled._FUNCTIONS


def _ask(retriever, count: int) -> None:
    for number in range(count):
        retriever.query(f"What did Sam say about chess {number}?")


def test_a_shape_left_behind_by_every_retriever_is_dropped(tmp_path):
    first = OnlineRetriever(tmp_path / "a", KeywordScorer(), HashEmbedder(), CONFIG)
    second = OnlineRetriever(tmp_path / "b", KeywordScorer(), HashEmbedder(), CONFIG)
    initial = CONFIG.initial_queries
    try:
        for retriever in (first, second):
            retriever.add(memories(20))
            _ask(retriever, initial + 1)  # the capacity doubles once
        assert first.solver_config.capacity == 2 * initial
        assert _compiled(initial) and _compiled(2 * initial)
        _ask(first, initial)  # first doubles again; second still holds 2 x
        assert first.solver_config.capacity == 4 * initial
        assert _compiled(2 * initial)
        _ask(second, initial)  # now no retriever holds it or can grow into it
        assert second.solver_config.capacity == 4 * initial
        assert not _compiled(2 * initial)
        assert _compiled(initial)  # every new folder starts there
        assert _compiled(4 * initial)
    finally:
        first.close()
        second.close()
    # A closed retriever holds no shape; a reopened one compiles what it needs.
    with OnlineRetriever(
        tmp_path / "a", KeywordScorer(), HashEmbedder(), CONFIG
    ) as reopened:
        assert reopened.num_queries == 2 * initial + 1
        assert reopened.query("What did Sam say about chess?").memory_ids
