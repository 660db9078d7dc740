"""The trained cross-encoder served by a real vLLM server equals the in-process
scorer on the same pairs (float32 both, within 1e-3), through ``/rerank`` and
``/score``."""

from __future__ import annotations

import numpy as np
import pytest

from earm_jax.cli.serve_scorer import resolve_model
from earm_jax.scoring.cross_encoder import CrossEncoderScorer
from earm_jax.scoring.serve import VllmServerConfig, start_server
from earm_jax.scoring.vllm import VllmScorer, VllmScorerConfig

from .conftest import vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.locomo]

AGREEMENT = 1e-3


@pytest.fixture(scope="module")
def served_fold(trained_scorer, tmp_path_factory):
    folder, _, _ = trained_scorer
    python = vllm_python()
    model, runner, limit = resolve_model(str(folder), "fold-0")
    assert runner == "pooling" and limit == 256  # the tokenizer's length
    config = VllmServerConfig(
        model=model,
        served_model_name="trained-fold-0",
        runner=runner,
        max_model_len=limit,
        python=python,
        log_path=str(tmp_path_factory.mktemp("vllm-trained") / "server.log"),
    )
    server = start_server(config, startup_timeout_s=420.0)
    try:
        yield server, model
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pairs(conversations):
    """Real LoCoMo questions against real turns (some evidence, most not)."""
    from earm_jax.locomo.memories import build_memories

    memory_set = build_memories(next(c for c in conversations if c.sample_id == "30"))
    texts = [m.text for m in memory_set.memories]
    requests = []
    for t, question in enumerate(memory_set.queries[:4]):
        chosen = list(memory_set.relevant_rows[t]) + list(range(7 * t, 7 * t + 25))
        requests.append((question.question, [texts[r] for r in chosen]))
    return requests


@pytest.mark.parametrize("endpoint", ["rerank", "score"])
def test_vllm_equals_the_in_process_scorer(served_fold, pairs, endpoint):
    server, model = served_fold
    local = CrossEncoderScorer(model).score_many(pairs)
    config = VllmScorerConfig(
        base_url=server.base_url,
        model=server.model_name,
        mode="rerank",
        rerank_endpoint=endpoint,
    )
    with VllmScorer(config) as client:
        remote = client.score_many(pairs)
    local_values = np.array([s.value for row in local for s in row])
    remote_values = np.array([s.value for row in remote for s in row])
    assert all(s.ok for row in remote for s in row)
    assert local_values.size == remote_values.size > 100
    assert np.max(np.abs(local_values - remote_values)) < AGREEMENT


def test_the_similarity_blend_gives_the_same_scores_on_both_paths(
    served_fold, pairs, embedding_cache_dir
):
    from earm_jax.scoring.similarity_blend import BlendedScorer, load_blend
    from earm_jax.store.embeddings import Embedder

    server, model = served_fold
    blend = load_blend(model)
    embedder = Embedder(cache_dir=embedding_cache_dir)
    local = BlendedScorer(CrossEncoderScorer(model), blend, embedder).score_many(pairs)
    config = VllmScorerConfig(
        base_url=server.base_url, model=server.model_name, mode="rerank"
    )
    with VllmScorer(config) as client:
        remote = BlendedScorer(client, blend, embedder).score_many(pairs)
    local_values = np.array([s.value for row in local for s in row])
    remote_values = np.array([s.value for row in remote for s in row])
    assert np.max(np.abs(local_values - remote_values)) < AGREEMENT
