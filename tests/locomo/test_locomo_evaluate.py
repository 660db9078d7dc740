"""LoCoMo evaluation: padding is safe, call counts are exact, the CLI's JSON shape."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli import locomo as locomo_command
from earm_jax.eval.compare import POLICIES
from earm_jax.locomo import build_streams, load_locomo
from earm_jax.locomo.evaluate import (
    LocomoRunSettings,
    evaluate_streams,
    policy_contexts,
)
from earm_jax.store.embeddings import Embedder

pytestmark = [pytest.mark.locomo, pytest.mark.slow]
RUN = LocomoRunSettings(rank=2, num_sweeps=1, ks=(10,))


@pytest.fixture(scope="module")
def two_streams(locomo_path, embedding_cache_dir):
    conversations = load_locomo(locomo_path / "30.json") + load_locomo(
        locomo_path / "26.json"
    )
    return build_streams(conversations, Embedder(cache_dir=embedding_cache_dir))


def test_padding_conversations_to_a_batch_changes_nothing(two_streams):
    together = evaluate_streams(two_streams, RUN, seed=3)
    # Conversation i uses fold_in(seed, i): alone, the second is at index 0, so
    # compare the first conversation, and the second with its own batch order.
    alone = evaluate_streams(two_streams[:1], RUN, seed=3)
    first = together.conversation == two_streams[0].meta.sample_id
    assert first.sum() == len(two_streams[0].meta.query_texts) == 81
    for policy in POLICIES:
        for name, values in alone.metrics[policy].items():
            np.testing.assert_allclose(
                together.metrics[policy][name][first],
                values,
                atol=1e-6,
                err_msg=f"{policy} {name}",
            )


def test_full_pays_the_pool_and_anchored_policies_pay_the_schedule(two_streams):
    result = evaluate_streams(two_streams, RUN, seed=0)
    pools = np.concatenate([s.arrays.valid.sum(-1) for s in two_streams])
    np.testing.assert_array_equal(result.metrics["full"]["calls"], pools)
    budget = np.array([200, 80, 50, 40, 35])[np.minimum(result.query_index // 10, 4)]
    np.testing.assert_array_equal(
        result.metrics["mixed"]["calls"], np.minimum(budget, pools)
    )
    assert result.metrics["semantic"]["calls"].sum() == 0
    assert set(np.unique(result.category)) <= {1, 2, 3, 4}


def test_contexts_are_chronological_and_hold_k_memories(two_streams):
    contexts = policy_contexts(two_streams, RUN, seed=0, k=10)
    for policy, rows in contexts.items():
        assert rows.shape == (81 + 152, 10)
        filled = rows >= 0
        for row, mask in zip(rows, filled, strict=True):
            assert np.all(np.diff(row[mask]) > 0), policy
    # Observed-only can hold fewer than K (only anchors), the others are full.
    assert (contexts["mixed"] >= 0).all()


def test_earm_locomo_writes_the_documented_json(
    tmp_path, locomo_path, embedding_cache_dir
):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(locomo_path / "30.json", data / "30.json")  # a temp copy, not the repo
    app = typer.Typer()
    locomo_command.register(app)
    app.command("noop")(lambda: None)
    out, png = tmp_path / "locomo.json", tmp_path / "locomo.png"
    result = CliRunner().invoke(
        app,
        [
            "locomo",
            "--data",
            str(data),
            "--rank",
            "2",
            "--top-k",
            "10,20",
            "--resamples",
            "200",
            "--cache-dir",
            str(embedding_cache_dir),
            "--num-sweeps",
            "1",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "not an LLM" in result.output
    payload = json.loads(out.read_text())
    assert set(payload["results"]) == set(POLICIES)
    turns = len(load_locomo(data / "30.json")[0].turns)
    assert payload["results"]["full"]["calls"] == 81 * min(200, turns)
    for key in (
        "contrasts",
        "gain_recovery",
        "per_category",
        "per_conversation",
        "per_stage",
        "data_faults",
        "versions",
        "config",
        "seeds",
    ):
        assert key in payload, key
    assert set(payload["per_category"]) <= {"1", "2", "3", "4"}
    assert sum(v["num_queries"] for v in payload["per_category"].values()) == 81
    assert payload["per_conversation"]["30"]["count"] > 0
    assert any(f["kind"] for f in payload["data_faults"])
    assert png.stat().st_size > 10_000


def test_scoring_a_conversation_stores_each_chunk_as_it_is_answered(tmp_path):
    """A scoring run stopped part way keeps what it was paid for: the score
    cache holds every chunk of questions answered before the stop, so a
    resumed run pays only for the rest."""
    from types import SimpleNamespace

    from earm_jax.locomo.evaluate import SCORING_CHUNK, scorer_scores
    from earm_jax.scoring.base import PairScore, ScorerIdentity
    from earm_jax.scoring.cache import CachedScorer, ScoreCache

    num_queries, pool = 2 * SCORING_CHUNK + 3, 4

    class StopsOnTheThirdBatch:
        identity = ScorerIdentity(kind="test-stops", prompt_version="1")
        batches = 0

        def score_many(self, requests):
            self.batches += 1
            if self.batches == 3:
                raise KeyboardInterrupt
            return [[PairScore.success(0.5) for _ in m] for _, m in requests]

    stream = SimpleNamespace(
        arrays=SimpleNamespace(
            valid=np.ones((num_queries, pool), bool),
            candidates=np.tile(np.arange(pool), (num_queries, 1)),
            scores=np.zeros((num_queries, pool), np.float32),
        ),
        meta=SimpleNamespace(
            query_texts=tuple(f"question {t}" for t in range(num_queries)),
            memory_texts=tuple(f"memory {m}" for m in range(pool)),
        ),
    )
    cache = ScoreCache(tmp_path / "scores.sqlite")
    scorer = StopsOnTheThirdBatch()
    with pytest.raises(KeyboardInterrupt):
        scorer_scores(stream, CachedScorer(scorer, cache))
    stored = [
        cache.get_many(scorer.identity, f"question {t}", stream.meta.memory_texts)
        for t in range(num_queries)
    ]
    answered = [all(v is not None for v in row) for row in stored]
    assert answered == [True] * (2 * SCORING_CHUNK) + [False] * 3
