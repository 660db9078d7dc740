"""Training that focuses on hard groups: which groups are hard, and that the
steps after the first pass draw only from them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from earm_jax.scoring import cross_encoder_training
from earm_jax.scoring.cross_encoder_training import (
    TrainingGroup,
    TrainingSettings,
    train_cross_encoder,
)
from earm_jax.scoring.hardest_groups import group_losses, hardest_groups


def _reference_losses(logits, sizes):
    """-log softmax(group)[0], one group at a time, in float64."""
    out, start = [], 0
    for size in sizes:
        part = np.asarray(logits[start : start + size], np.float64)
        out.append(-(part[0] - np.log(np.sum(np.exp(part)))))
        start += size
    return np.array(out)


def test_group_losses_are_the_listwise_loss_of_each_group():
    rng = np.random.default_rng(3)
    sizes = [1, 4, 2, 7]
    logits = rng.normal(0, 30, sum(sizes)).astype(np.float32)
    offsets = rng.normal(0, 1, sum(sizes))
    got = group_losses(logits, sizes)
    np.testing.assert_allclose(got, _reference_losses(logits / 1.0, sizes), rtol=1e-9)
    assert got[0] == 0.0  # a positive alone has nothing to lose against
    np.testing.assert_allclose(
        group_losses(logits, sizes, offsets),
        _reference_losses(logits + offsets, sizes),
        rtol=1e-9,
    )


def _group(name: str, positive_logit: float, cosine: float = 0.0) -> TrainingGroup:
    """A group whose memories' text is their logit under ``_logits_of``."""
    return TrainingGroup(
        query=name,
        positive=str(positive_logit),
        hard_negatives=("1.0", "0.0"),
        other_negatives=("50.0",),  # never part of the hardness
        similarities=(cosine, 0.0, 0.0, 0.0),
    )


def _logits_of(pairs):
    return np.array([float(memory) for _, memory in pairs])


def test_the_hardest_groups_rank_their_positive_worst():
    groups = [
        _group("easy", 5.0),
        _group("hardest", -3.0),
        _group("middle", 1.0),
        _group("hard", -1.0),
        _group("tied with hard", -1.0),
    ]
    assert hardest_groups(_logits_of, groups, 0.2).tolist() == [1]
    assert hardest_groups(_logits_of, groups, 0.4).tolist() == [1, 3]  # tie: earlier
    assert hardest_groups(_logits_of, groups, 0.41).tolist() == [1, 3, 4]
    assert hardest_groups(_logits_of, groups, 1.0).tolist() == [0, 1, 2, 3, 4]
    # On similarity's residual a high cosine makes a positive easy.
    residual = [_group("a", -3.0, cosine=1.0), _group("b", -1.0)]
    assert hardest_groups(_logits_of, residual, 0.5).tolist() == [0]
    assert hardest_groups(_logits_of, residual, 0.5, residual_weight=10).tolist() == [1]
    for share in (0.0, -0.5, 1.01, math.nan):
        with pytest.raises(ValueError, match="share"):
            hardest_groups(_logits_of, groups, share)


class _RecordingTokenizer:
    """The tokenizer, recording the queries of each call: one per training
    step, and one for the hardness pass."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.steps: list[set[str]] = []

    def __call__(self, queries, memories, **kwargs):
        self.steps.append(set(queries))
        return self._tokenizer(queries, memories, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


@pytest.mark.slow
def test_after_the_first_pass_training_draws_only_from_the_hardest(
    tmp_path, monkeypatch
):
    from earm_jax.scoring.cross_encoder_training import load_base_model

    from .tiny_models import build_cross_encoder

    folder = build_cross_encoder(tmp_path / "model")
    words = "dog cat park city trip book movie music job school beach yoga".split()
    groups = [
        TrainingGroup(
            query=f"when did Alice visit the {word}",
            positive=f"Alice: I visited the {word} on monday",
            hard_negatives=tuple(f"Bob: the {w} was fun" for w in words[:3]),
            other_negatives=tuple(f"Maria: my {w}" for w in words[3:9]),
        )
        for word in words
    ]
    chosen: list[np.ndarray] = []

    def recorded(*args, **kwargs):
        chosen.append(hardest_groups(*args, **kwargs))
        return chosen[-1]

    monkeypatch.setattr(cross_encoder_training, "hardest_groups", recorded)
    runs = {}
    for share in (1.0, 0.25):
        tokenizer, model = load_base_model(folder)
        recording = _RecordingTokenizer(tokenizer)
        settings = TrainingSettings(
            group_size=4, hard_negatives=2, groups_per_step=2, epochs=3.0,
            max_steps=0, learning_rate=1e-3, precision="float32", hardest_share=share,
        )  # fmt: skip
        report = train_cross_encoder(recording, model, groups, settings)
        runs[share] = (recording.steps, report)
    first_pass = len(groups) // 2
    all_steps, unfocused = runs[1.0]
    focused_steps, focused = runs[0.25]
    assert unfocused.focused_groups == 0 and focused.focused_groups == 3
    assert len(chosen) == 1 and len(chosen[0]) == 3  # measured once, after pass 1
    # The first pass is the same; the hardness pass then reads every group,
    # and every later step draws from the chosen three.
    assert focused_steps[:first_pass] == all_steps[:first_pass]
    assert focused_steps[first_pass] == {group.query for group in groups}
    hard_queries = {groups[i].query for i in chosen[0]}
    later = set().union(*focused_steps[first_pass + 1 :])
    assert later == hard_queries
    assert len(all_steps) == 18 and len(focused_steps) == 18 + 1
