"""The embedder's identity is recorded at creation and checked at open; new
folders take the ``best`` preset (old ones keep theirs); ``top_similarity``
scores the most similar candidates; ``rerank`` records new text and metadata."""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever, RetrieverConfig

sys.path.insert(0, str(Path(__file__).parent))
from fakes import (  # noqa: E402
    CONFIG,
    HashEmbedder,
    KeywordScorer,
    NamedHashEmbedder,
    memories,
    queries,
    store_config,
    stored_config,
)


class OtherModel(HashEmbedder):
    """Another model of the same width: the same words, other directions."""

    def embed(self, texts):
        vectors = super().embed(texts)
        return np.roll(vectors, 7, axis=1)


class NamedEmbedder(HashEmbedder):
    def __init__(self, identity):
        super().__init__()
        self.identity = identity


def test_another_embedder_is_refused_at_open(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(memories(8))
    for embedder, message in [
        (OtherModel(), r"by another model: .*\(cosine 0\.\d+ < 0\.999\)"),
        (HashEmbedder(width=32), "with width 64; this embedder gives width 32"),
    ]:
        with pytest.raises(ValueError, match=message):
            OnlineRetriever(tmp_path, KeywordScorer(), embedder, None)
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None) as again:
        assert again.num_memories == 8


def test_named_embedders_are_compared_by_name(tmp_path):
    folder = tmp_path / "named"
    with OnlineRetriever(folder, KeywordScorer(), NamedEmbedder("mini-v1"), CONFIG):
        pass
    with pytest.raises(ValueError, match="by 'mini-v1', not 'mini-v2'"):
        OnlineRetriever(folder, KeywordScorer(), NamedEmbedder("mini-v2"), None)


def test_a_folder_without_a_recorded_embedder_records_it_on_open(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(memories(8))
    db = sqlite3.connect(tmp_path / "journal.sqlite")
    db.execute("DELETE FROM meta WHERE key='embedder'")  # as older folders are
    db.commit()
    db.close()
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None):
        pass
    with pytest.raises(ValueError, match="by another model"):
        OnlineRetriever(tmp_path, KeywordScorer(), OtherModel(), None)


def test_new_folders_take_best_and_old_folders_keep_their_preset(tmp_path):
    assert RetrieverConfig().preset == "best"
    paper = dataclasses.replace(CONFIG, preset="paper")
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), paper) as agent:
        agent.add(memories(8))
    # A folder made before presets existed stored no preset: the paper's.
    stored = stored_config(tmp_path)
    del stored["preset"]
    del stored["call_order"]  # nor a call order: by similarity
    del stored["stop_rule"]  # nor a stop rule: settle or spill
    store_config(tmp_path, stored)
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None) as again:
        assert again.config.preset == "paper" and again.ledger is None
        assert again.config.call_order == "similarity"
        assert again.config.stop_rule == "settle_or_spill"
    # Reopened with today's paper settings: the call order and the stop rule
    # are best's alone, so the stored ones do not have to match.
    assert paper.call_order == "embedding"
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), paper) as again:
        assert again.config.preset == "paper"


def test_a_best_folder_of_the_similarity_order_refuses_todays_default(tmp_path):
    """A best folder keeps the calls its ledger was built with: opened with
    the default config (the embedding order, spending) it is refused, naming
    both fields; with config=None it opens as it was made."""
    older = dataclasses.replace(
        CONFIG, preset="best", call_order="similarity", stop_rule="settle_or_spill"
    )
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), older) as agent:
        agent.add(memories(8))
        agent.query("Who plays chess?")
    today = dataclasses.replace(CONFIG, preset="best")
    with pytest.raises(ValueError, match="call_order: stored 'similarity'.*stop_rule"):
        OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), today)
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None) as again:
        assert (again.config.call_order, again.config.stop_rule) == (
            "similarity",
            "settle_or_spill",
        )


def test_top_similarity_scores_the_most_similar_candidates(tmp_path):
    config = dataclasses.replace(CONFIG, preset="top_similarity", call_budget=0.25)
    scorer = KeywordScorer()
    with OnlineRetriever(tmp_path, scorer, HashEmbedder(), config) as agent:
        agent.add(memories(30))
        for ask in queries(5):
            before = len(scorer.paid)
            answer = agent.query(ask)
            assert answer.budget == 3  # ceil(0.25 * 12), from the first query on
            assert answer.calls + answer.cache_hits == 3
            pool = agent._pool_from_vector(ask, HashEmbedder().embed([ask])[0], None)
            most_similar = {
                agent.rows.texts[r] for r in np.asarray(pool.candidates)[:3]
            }
            assert {m for _, m in scorer.paid[before:]} <= most_similar
    with pytest.raises(ValueError, match="preset must be one of"):
        RetrieverConfig(preset="nope")


def test_rerank_records_new_text_as_an_edit_and_new_metadata(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        pool = [
            {"id": "m1", "text": "Sam plays chess.", "metadata": {"v": 1}},
            {"id": "m2", "text": "Sam likes tea.", "metadata": {"v": 1}},
        ]
        agent.rerank("Who plays chess?", pool)
        old_row = agent.rows.row_of["m1"]
        pool[0] = {"id": "m1", "text": "Sam plays chess daily.", "metadata": {"v": 3}}
        pool[1] = {"id": "m2", "text": "Sam likes tea.", "metadata": {"v": 2}}
        answer = agent.rerank("Who plays chess?", pool)
        assert dict(zip(answer.memory_ids, answer.metadata, strict=True)) == {
            "m1": {"v": 3},
            "m2": {"v": 2},
        }
        assert agent.get(["m1"])[0].text == "Sam plays chess daily."
        # The new text is a new version, with no evidence before this query;
        # the metadata-only change kept m2's row (and its evidence).
        assert agent.rows.row_of["m1"] != old_row
        assert agent.rows.row_of["m2"] == 1
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None) as again:
        assert [m.metadata for m in again.get(["m1", "m2"])] == [{"v": 3}, {"v": 2}]


def test_best_follows_the_texts_by_default_and_refuses_to_keep_no_query():
    """The default ``best`` reads every query's embedding on reopen, so
    keeping nothing of a query is refused naming both fields."""
    assert RetrieverConfig().reads_embeddings
    assert not RetrieverConfig(call_order="similarity").reads_embeddings
    with pytest.raises(ValueError, match="query_retention='none'.*call_order"):
        RetrieverConfig(query_retention="none")
    RetrieverConfig(query_retention="none", call_order="similarity")


def test_keeping_no_query_is_judged_by_the_settings_the_folder_runs_under(tmp_path):
    """A paper folder opens keeping no query; a new folder with the default
    best is refused before any file is made."""
    paper = dataclasses.replace(CONFIG, preset="paper")
    with OnlineRetriever(tmp_path / "a", KeywordScorer(), HashEmbedder(), paper):
        pass
    none = {"query_retention": "none"}
    with OnlineRetriever(
        tmp_path / "a", KeywordScorer(), HashEmbedder(), None, runtime=none
    ) as again:
        assert (again.config.preset, again.config.query_retention) == (
            "paper",
            "none",
        )
    with pytest.raises(ValueError, match="query_retention='none'"):
        OnlineRetriever(tmp_path / "b", KeywordScorer(), HashEmbedder(), runtime=none)
    journal = tmp_path / "b" / "journal.sqlite"
    assert not journal.exists() or journal.stat().st_size == 0


def test_a_folder_of_the_model_alone_names_the_blend_when_opened_blended(tmp_path):
    """A folder created with a model's answers alone, opened with that model
    blended with the cosine (model_scorer, earm mcp --scorer-model): refused
    as another scorer, naming the way to open it."""
    from earm_jax.scoring.similarity_blend import BlendedScorer, SimilarityBlend

    with OnlineRetriever(tmp_path, KeywordScorer(), NamedHashEmbedder(), CONFIG) as a:
        a.add(memories(8))
    blend = SimilarityBlend(0.8, 2.0, -1.0, NamedHashEmbedder.identity)
    blended = BlendedScorer(KeywordScorer(), blend, NamedHashEmbedder())
    with pytest.raises(ValueError, match="without the similarity blend.*--no-scorer"):
        OnlineRetriever(tmp_path, blended, NamedHashEmbedder(), None)
    other = BlendedScorer(KeywordScorer("another"), blend, NamedHashEmbedder())
    with pytest.raises(ValueError, match="use a new folder for this scorer"):
        OnlineRetriever(tmp_path, other, NamedHashEmbedder(), None)
