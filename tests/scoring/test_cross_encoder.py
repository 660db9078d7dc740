"""The in-process cross-encoder scorer and the training pieces behind it.

The trained model (``trained_scorer``, a real MiniLM cross-encoder trained for
two steps) is checked against a direct transformers forward pass; calibration
and sampling against their definitions.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings
from earm_jax.scoring.cross_encoder_training import (
    TrainingGroup,
    TrainingSettings,
    listwise_loss,
    sample_group,
    sample_group_indices,
    train_cross_encoder,
)
from earm_jax.scoring.platt import fit_platt
from earm_jax.scoring.scorer_manifest import open_scorer_folder

pytestmark = pytest.mark.slow

QUERY = "When did Caroline go to the LGBTQ support group?"
MEMORIES = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: I painted a lake sunrise last year.",
    "Caroline: Thanks, Mel! What have you been up to lately?",
]


def _direct_probabilities(folder, pairs):
    """sigmoid(logit) from transformers itself, float32, no batching tricks."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    out = []
    with torch.inference_mode():
        for query, memory in pairs:
            features = tokenizer(query, memory, return_tensors="pt")
            out.append(float(torch.sigmoid(model(**features).logits[0, 0])))
    return np.array(out)


@pytest.fixture(scope="module")
def fold_folder(trained_scorer):
    folder, _, _ = trained_scorer
    return open_scorer_folder(folder).root / "fold-0"


def test_scores_equal_a_direct_forward_pass(fold_folder):
    scorer = CrossEncoderScorer(fold_folder)
    scores = scorer.score(QUERY, MEMORIES)
    assert all(s.ok and 0.0 <= s.value <= 1.0 for s in scores)
    expected = _direct_probabilities(fold_folder, [(QUERY, m) for m in MEMORIES])
    np.testing.assert_allclose([s.value for s in scores], expected, atol=1e-5)


def test_score_many_equals_score_per_query(fold_folder):
    scorer = CrossEncoderScorer(fold_folder, CrossEncoderSettings(batch_size=2))
    requests = [(QUERY, MEMORIES), ("What did Melanie paint?", MEMORIES[1:])]
    together = scorer.score_many(requests)
    one_by_one = [scorer.score(q, m) for q, m in requests]
    for row, single in zip(together, one_by_one, strict=True):
        np.testing.assert_allclose(
            [s.value for s in row], [s.value for s in single], atol=1e-5
        )
    assert scorer.pairs_scored == 2 * (len(MEMORIES) + len(MEMORIES) - 1)


def test_identity_names_the_weights_and_the_dtype(fold_folder, trained_scorer):
    folder, _, _ = trained_scorer
    exact = CrossEncoderScorer(fold_folder)
    fast = CrossEncoderScorer(
        fold_folder, CrossEncoderSettings(backend="torch-bfloat16")
    )
    other = CrossEncoderScorer(folder / "fold-1")
    assert exact.identity.kind == "cross-encoder"
    assert exact.identity.key() != fast.identity.key()
    assert exact.identity.model != other.identity.model  # different weights
    values = [s.value for s in exact.score(QUERY, MEMORIES)]
    fast_values = [s.value for s in fast.score(QUERY, MEMORIES)]
    assert np.max(np.abs(np.subtract(values, fast_values))) < 0.02


def test_the_saved_sigmoid_is_the_calibrated_probability(trained_scorer):
    """The fold folder carries its Platt scaling in its last layer."""
    folder, _, manifest = trained_scorer
    calibration = manifest["folds"][0]["calibration"]
    assert calibration["scale"] > 0
    scorer = CrossEncoderScorer(folder / "fold-0")
    logits = scorer.logits([(QUERY, m) for m in MEMORIES])
    probabilities = [s.value for s in scorer.score(QUERY, MEMORIES)]
    np.testing.assert_allclose(
        probabilities, [1 / (1 + math.exp(-x)) for x in logits], atol=1e-6
    )


def test_bad_settings_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        CrossEncoderSettings(batch_size=0)
    with pytest.raises(ValueError, match="backend"):
        CrossEncoderSettings(backend="torch-float16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_length"):
        CrossEncoderSettings(max_length=4)
    with pytest.raises(ValueError, match="does not exist"):
        CrossEncoderScorer(tmp_path / "missing")
    with pytest.raises(ValueError, match="config.json"):
        CrossEncoderScorer(tmp_path)


def test_platt_recovers_a_known_logistic_model():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, 40_000)
    labels = rng.random(logits.size) < 1 / (1 + np.exp(-(0.7 * logits - 1.5)))
    calibration = fit_platt(logits, labels)
    assert calibration.scale == pytest.approx(0.7, abs=0.03)
    assert calibration.shift == pytest.approx(-1.5, abs=0.05)
    assert not calibration.scale_fixed


def test_platt_never_reverses_a_ranking():
    """A model that ranks the held-back pairs backwards keeps its order: only
    the shift is fitted."""
    rng = np.random.default_rng(1)
    logits = rng.normal(0.0, 1.0, 5_000)
    labels = logits < -1.0
    calibration = fit_platt(logits, labels)
    assert calibration.scale == 1.0 and calibration.scale_fixed
    with pytest.raises(ValueError, match="both"):
        fit_platt(logits, np.zeros(logits.size, bool))


def test_a_group_is_the_positive_then_distinct_negatives():
    group = TrainingGroup(
        "q",
        "pos",
        tuple(f"hard{i}" for i in range(3)),
        tuple(f"o{i}" for i in range(50)),
    )
    settings = TrainingSettings(group_size=8, hard_negatives=5)
    rng = np.random.default_rng(0)
    for _ in range(20):
        memories = sample_group(group, settings, rng)
        assert memories[0] == "pos" and len(memories) == 8
        assert len(set(memories)) == 8
        # Only 3 hard negatives exist: the other 4 come from the pool's rest.
        assert sum(m.startswith("hard") for m in memories) == 3
    short = TrainingGroup("q", "pos", ("h",), ("o",))
    assert sample_group(short, settings, rng) == ["pos", "h", "o"]


def test_group_indices_name_the_sampled_memories():
    """The indices a step samples are the memories it trains on, so each
    memory's cosine travels with it."""
    group = TrainingGroup(
        "q",
        "pos",
        tuple(f"hard{i}" for i in range(6)),
        tuple(f"o{i}" for i in range(30)),
        tuple(float(i) for i in range(37)),
    )
    settings = TrainingSettings(group_size=8, hard_negatives=3)
    for seed in range(5):
        chosen = sample_group_indices(group, settings, np.random.default_rng(seed))
        texts = sample_group(group, settings, np.random.default_rng(seed))
        assert [group.memories[i] for i in chosen] == texts
        assert [group.similarities[i] for i in chosen] == [float(i) for i in chosen]
        assert chosen[0] == 0 and all(1 <= i <= 6 for i in chosen[1:4])
    with pytest.raises(ValueError, match="similarities"):
        TrainingGroup("q", "pos", ("h",), ("o",), (0.5,))


def test_the_residual_loss_ranks_logit_plus_weighted_cosine():
    """Against a float64 NumPy reference: each group's -log softmax of
    logit + w * cosine at its positive, averaged; the offsets carry no
    gradient."""
    import torch

    rng = np.random.default_rng(0)
    sizes = [4, 6, 3]
    logits = rng.normal(size=sum(sizes))
    cosines = rng.uniform(0.0, 1.0, sum(sizes))
    for weight in (0.0, 8.0):
        ranked = logits + weight * cosines
        expected, start = 0.0, 0
        for size in sizes:
            part = ranked[start : start + size]
            expected -= part[0] - np.log(np.exp(part).sum())
            start += size
        expected /= len(sizes)
        given = torch.tensor(logits, requires_grad=True)
        loss = listwise_loss(
            given, sizes, weight * torch.tensor(cosines) if weight else None
        )
        assert float(loss.detach()) == pytest.approx(expected, rel=1e-12)
        loss.backward()
        assert given.grad is not None and np.isfinite(given.grad.numpy()).all()


def test_residual_training_refuses_groups_without_cosines():
    group = TrainingGroup("q", "pos", ("h",), ("o",))
    with pytest.raises(ValueError, match="residual_weight"):
        train_cross_encoder(None, None, [group], TrainingSettings(residual_weight=4.0))


def test_training_settings_name_the_field():
    for field, value in [
        ("group_size", 1),
        ("hard_negatives", 16),
        ("epochs", 0.0),
        ("learning_rate", -1.0),
        ("precision", "half"),
        ("max_steps", -1),
        ("layers", -1),
        ("layers", 2.0),
        ("residual_weight", -1.0),
        ("residual_weight", float("nan")),
        ("hardest_share", 0.0),
        ("hardest_share", 1.5),
        ("hardest_share", float("nan")),
    ]:
        with pytest.raises(ValueError, match=field):
            TrainingSettings(**{field: value})


def test_a_cut_model_is_the_first_layers_of_the_base_and_saves_as_it_is(tmp_path):
    """MiniLM cut to 2 of its 6 layers keeps the embeddings, those 2 layers
    and the pooler exactly; the saved folder reloads with 2 layers and gives
    the same logits; more layers than the base has is refused by name."""
    import torch

    from earm_jax.scoring.cross_encoder_training import load_base_model, save_model
    from earm_jax.store.embeddings import default_model_path

    torch.manual_seed(0)
    _, full = load_base_model(default_model_path())
    torch.manual_seed(0)
    tokenizer, cut = load_base_model(default_model_path(), layers=2)
    assert len(full.base_model.encoder.layer) == 6
    assert len(cut.base_model.encoder.layer) == cut.config.num_hidden_layers == 2
    kept = cut.state_dict()
    for name, value in full.state_dict().items():
        if name.startswith("bert.encoder.layer.") and int(name.split(".")[3]) >= 2:
            assert name not in kept
        else:
            # The head starts fresh, drawn the same way from the same seed.
            assert torch.equal(kept[name], value), name
    folder = save_model(tokenizer, cut, tmp_path / "cut", 256)
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    got = np.array(CrossEncoderScorer(folder).logits([(QUERY, m) for m in MEMORIES]))
    batch = tokenizer([QUERY] * 3, MEMORIES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = cut.eval()(**batch).logits[:, 0].numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    with pytest.raises(ValueError, match="layers must be between 1 and .* 6"):
        load_base_model(default_model_path(), layers=7)


def test_the_fold_blends_its_answer_with_the_cosine(
    trained_scorer, embedding_cache_dir
):
    """The blend fitted on the held-back questions, applied to the model's
    calibrated answer, the texts' cosine and the question's word coverage:
    sigmoid(a logit(p) + b cos + d cov + c)."""
    from earm_jax.scoring.scorer_manifest import model_scorer
    from earm_jax.scoring.similarity_blend import BlendedScorer, load_blend
    from earm_jax.scoring.word_coverage import word_coverage
    from earm_jax.store.embeddings import Embedder

    folder, _, manifest = trained_scorer
    blend = load_blend(folder / "fold-0")
    assert blend is not None and manifest["folds"][0]["similarity_blend"]["pairs"] > 0
    # The default build weighs word coverage (a fitted weight is never exactly 0).
    assert blend.uses_coverage
    assert manifest["folds"][0]["similarity_blend"]["coverage_weight"] != 0.0
    embedder = Embedder(cache_dir=embedding_cache_dir)
    scorer = model_scorer(folder / "fold-0", None, embedder)
    assert isinstance(scorer, BlendedScorer)
    assert scorer.identity.kind == "cross-encoder+similarity"
    plain = CrossEncoderScorer(folder / "fold-0").score(QUERY, MEMORIES)
    blended = scorer.score(QUERY, MEMORIES)
    vectors = embedder.embed([QUERY, *MEMORIES])
    cosines = vectors[1:] @ vectors[0]
    p = np.clip([s.value for s in plain], 1e-7, 1 - 1e-7)
    expected = 1 / (
        1
        + np.exp(
            -(
                blend.logit_weight * np.log(p / (1 - p))
                + blend.similarity_weight * cosines
                + blend.coverage_weight * word_coverage(QUERY, MEMORIES)
                + blend.shift
            )
        )
    )
    np.testing.assert_allclose([s.value for s in blended], expected, atol=1e-5)


def test_a_blend_refuses_another_sentence_encoder(trained_scorer):
    from earm_jax.scoring.similarity_blend import (
        BlendedScorer,
        SimilarityBlend,
        load_blend,
    )

    folder, _, _ = trained_scorer
    blend = load_blend(folder / "fold-0")

    class Other:
        identity = "another-model-0123"

    with pytest.raises(ValueError, match="fitted with"):
        BlendedScorer(CrossEncoderScorer(folder / "fold-0"), blend, Other())
    assert SimilarityBlend.from_json(blend.to_json()) == blend
    with pytest.raises(ValueError, match="similarity_weight"):
        SimilarityBlend(1.0, float("nan"), 0.0, "m")
    with pytest.raises(ValueError, match="format"):
        SimilarityBlend.from_json({"format": "x"})


def test_auto_precision_follows_the_cpu(monkeypatch, tmp_path):
    """bfloat16 only where the CPU computes it natively: emulated bfloat16 is
    several times slower than float32 (AVX2-only CPUs)."""
    from earm_jax.scoring import cross_encoder_training as training

    monkeypatch.setattr(training, "native_bfloat16", lambda: True)
    assert training.resolve_precision("auto") == "bfloat16"
    monkeypatch.setattr(training, "native_bfloat16", lambda: False)
    assert training.resolve_precision("auto") == "float32"
    assert training.resolve_precision("bfloat16") == "bfloat16"
    monkeypatch.undo()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n")
    assert training.native_bfloat16(str(cpuinfo))
    cpuinfo.write_text("processor : 0\nflags : fpu avx2\n")
    assert not training.native_bfloat16(str(cpuinfo))
    assert not training.native_bfloat16(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="precision"):
        training.TrainingSettings(precision="float16")


def test_loading_a_trained_folder_says_nothing_of_a_new_model(tmp_path, caplog):
    """A trained folder has no modules.json; sentence-transformers' INFO line
    "initializing a new CrossEncoder model" would read as random weights."""
    import logging

    from .tiny_models import build_cross_encoder

    folder = build_cross_encoder(tmp_path / "model")
    # The logger is set to INFO here whatever other libraries in the process
    # did to it, so the line would be captured; loading must leave it at INFO.
    with caplog.at_level(logging.INFO, logger="sentence_transformers"):
        scorer = CrossEncoderScorer(folder)
        assert scorer.score(QUERY, MEMORIES[:1])[0].ok
        assert logging.getLogger("sentence_transformers").level == logging.INFO
    assert not [r for r in caplog.records if "modules.json" in r.getMessage()]


def test_model_logits_equal_one_pair_at_a_time(tmp_path):
    """The training's inference pass (batches sorted by tokens, padded)
    gives each pair the logit of its own unpadded forward pass, in order."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from earm_jax.scoring.cross_encoder_training import model_logits

    from .tiny_models import build_cross_encoder

    folder = build_cross_encoder(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    pairs = [(QUERY, m) for m in MEMORIES] + [("What did Melanie paint?", "a lake")]
    got = model_logits(tokenizer, model, pairs, batch_size=2)
    with torch.inference_mode():
        expected = [
            float(model(**tokenizer(q, m, return_tensors="pt")).logits[0, 0])
            for q, m in pairs
        ]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert model_logits(tokenizer, model, []).shape == (0,)


def test_one_seed_is_one_model():
    """The fresh head is drawn after seeding, so a seed fixes the whole build:
    the same seed twice trains to the same losses, bit for bit."""
    import torch

    from earm_jax.scoring.cross_encoder_training import load_base_model
    from earm_jax.store.embeddings import default_model_path

    def head(seed):
        return load_base_model(default_model_path(), layers=2, seed=seed)[1].classifier

    assert torch.equal(head(0).weight, head(0).weight)
    assert not torch.equal(head(0).weight, head(1).weight)
    group = TrainingGroup(QUERY, MEMORIES[0], (MEMORIES[2],), (MEMORIES[1],))
    settings = TrainingSettings(
        group_size=3,
        hard_negatives=1,
        groups_per_step=2,
        epochs=6.0,
        precision="float32",
    )
    runs = []
    for _ in range(2):
        torch.manual_seed(1234 + len(runs))  # whatever state came before
        tokenizer, model = load_base_model(default_model_path(), layers=2, seed=0)
        runs.append([])
        train_cross_encoder(
            tokenizer,
            model,
            [group],
            settings,
            lambda *step, run=runs[-1]: run.append(step[2]),
        )
    assert len(runs[0]) == 3 and runs[0] == runs[1]
