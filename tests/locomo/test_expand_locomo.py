"""Search expansion on LoCoMo: labels of every memory, and `earm locomo --expand`."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli import locomo as locomo_command
from earm_jax.eval.compare import POLICIES
from earm_jax.locomo.evaluate import LocomoRunSettings, pad_and_stack
from earm_jax.locomo.streams import build_stream
from earm_jax.store.embeddings import Embedder


def _app() -> typer.Typer:
    app = typer.Typer()
    locomo_command.register(app)
    app.command("noop")(lambda: None)
    return app


def test_run_settings_refuse_negative_expand():
    with pytest.raises(ValueError, match="expand"):
        LocomoRunSettings(expand=-1)


@pytest.mark.locomo
@pytest.mark.slow
def test_relevant_memories_agree_with_the_pool_labels(
    conversations, embedding_cache_dir
):
    conversation = next(c for c in conversations if c.sample_id.endswith("30"))
    stream = build_stream(conversation, Embedder(cache_dir=embedding_cache_dir))
    arrays = stream.arrays
    truth = arrays.relevant_memories
    num_queries, num_memories = truth.shape
    assert truth.shape == (arrays.candidates.shape[0], arrays.insert_time.shape[0])
    pool = np.take_along_axis(truth, arrays.candidates, axis=1) & arrays.valid
    np.testing.assert_array_equal(pool, arrays.relevant)
    inserted = arrays.insert_time[None, :] <= np.arange(num_queries)[:, None]
    np.testing.assert_array_equal((truth & inserted).sum(1), arrays.num_relevant)
    # The room: relevant memories the pool misses exist on turns.
    assert int(arrays.num_relevant.sum()) > int(arrays.relevant.sum())
    batch, real = pad_and_stack([arrays, arrays])
    assert batch.relevant_memories.shape == (2, num_queries, num_memories)
    np.testing.assert_array_equal(batch.relevant_memories[1], truth)


@pytest.mark.locomo
@pytest.mark.slow
def test_locomo_expand_json(tmp_path, locomo_path, embedding_cache_dir):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(locomo_path / "30.json", data / "30.json")
    out = tmp_path / "expand.json"
    result = CliRunner().invoke(
        _app(),
        [
            "locomo",
            "--data",
            str(data),
            "--rank",
            "2",
            "--top-k",
            "10",
            "--resamples",
            "100",
            "--num-sweeps",
            "1",
            "--cache-dir",
            str(embedding_cache_dir),
            "--expand",
            "5",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "mixed_expand top10" in result.output
    payload = json.loads(out.read_text())
    assert payload["config"]["expand"] == 5
    assert set(payload["results"]) == set(POLICIES) | {"mixed_expand"}
    expanded = payload["results"]["mixed_expand"]
    assert expanded["calls"] == payload["results"]["mixed"]["calls"]
    for metric in ("recall@10", "ndcg@10", "mrr"):
        low, high = payload["contrasts"]["mixed_expand-mixed"][metric]["ci"]
        assert low <= payload["contrasts"]["mixed_expand-mixed"][metric]["mean"] <= high
        assert "ci" in expanded[metric]
    expansion = payload["expansion"]
    entry = expansion["@10"]
    assert 0 <= entry["expanded_per_query"]["mean"] <= 5
    assert 0 <= entry["queries_with_expanded"]["mean"] <= 1
    assert entry["relevant_total"] <= entry["expanded_total"]
    assert 0 <= expansion["slots_filled_per_query"]["mean"] <= 5
    assert (
        "mixed_expand-mixed"
        in next(iter(payload["per_conversation"].values()))["contrasts"]
    )
