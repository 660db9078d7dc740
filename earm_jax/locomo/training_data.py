"""LoCoMo as training data for a relevance cross-encoder, with cross-fitting.

A question's gold evidence gives its relevant memories; its semantic pool gives
the negatives a reranker meets in use: the most similar non-relevant
candidates (the look-alikes) and the rest of the pool. Folds are groups of
whole conversations, so a model never sees the memories or the questions of a
conversation it is later evaluated on; a conversation is recognised by the
digest of its content, not by its id, so another data set that reuses the ids
is not mistaken for the training data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

import numpy as np

from earm_jax.locomo.data import Conversation
from earm_jax.locomo.streams import LocomoStream
from earm_jax.scoring.cross_encoder_training import TrainingGroup


def conversation_digest(conversation: Conversation) -> str:
    """SHA-256 of a conversation's turns and observations (ids, speakers, texts):
    what a model trained on it has seen, whatever the file or id."""
    content = {
        "turns": [
            [turn.dia_id, turn.speaker, turn.text, turn.image_caption or ""]
            for turn in conversation.turns
        ],
        "observations": [
            [list(fact.dia_ids), fact.speaker, fact.text]
            for fact in conversation.observations
        ],
    }
    encoded = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def assign_folds(
    conversations: Sequence[Conversation], num_folds: int
) -> list[list[str]]:
    """Splits conversations into ``num_folds`` groups of about equal question
    count (largest first, each to the lightest fold; ties by id).

    Returns:
      ``[fold][sample ids]``: each fold in file order, folds by their first
      conversation's place in the file.

    Raises:
      ValueError: ``num_folds`` < 1, or more folds than conversations.
    """
    if isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 1:
        raise ValueError(f"folds must be an int >= 1, got {num_folds!r}")
    if num_folds > len(conversations):
        raise ValueError(
            f"folds ({num_folds}) must not exceed the conversations "
            f"({len(conversations)})"
        )
    order = {c.sample_id: i for i, c in enumerate(conversations)}
    sizes = sorted(
        ((len(c.queries()), c.sample_id) for c in conversations),
        key=lambda item: (-item[0], order[item[1]]),
    )
    folds: list[list[str]] = [[] for _ in range(num_folds)]
    loads = [0] * num_folds
    for size, sample_id in sizes:
        lightest = min(range(num_folds), key=lambda f: (loads[f], f))
        folds[lightest].append(sample_id)
        loads[lightest] += size
    ordered = [sorted(fold, key=order.__getitem__) for fold in folds]
    return sorted(ordered, key=lambda fold: order[fold[0]])


def validation_questions(num_queries: int, fraction: float, seed: int) -> np.ndarray:
    """``bool[T]``: the questions held out of training for calibration (a
    seeded draw of ``round(fraction * T)``, at least one where ``fraction > 0``
    and there are two questions or more)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation fraction must be in [0, 1), got {fraction}")
    held = np.zeros(num_queries, bool)
    count = int(round(fraction * num_queries))
    if fraction > 0 and num_queries >= 2:
        count = max(count, 1)
    if count:
        rng = np.random.default_rng(seed)
        held[rng.choice(num_queries, count, replace=False)] = True
    return held


def training_groups(
    stream: LocomoStream,
    questions: np.ndarray | None = None,
    hard_pool: int = 20,
) -> list[TrainingGroup]:
    """One group per (question, relevant memory) of a conversation.

    Args:
      stream: the conversation in one memory setting, with its pools.
      questions: ``bool[T]`` which questions to use (default: all).
      hard_pool: how many of the most similar non-relevant pool candidates are
        the question's hard negatives; the rest of the pool are the others.

    Returns:
      Groups in question order (questions with no relevant memory give none).
    """
    arrays, meta = stream.arrays, stream.meta
    texts = meta.memory_texts
    relevant_rows = meta.memory_set.relevant_rows
    groups = []
    for t, question in enumerate(meta.query_texts):
        if questions is not None and not questions[t]:
            continue
        positives = relevant_rows[t]
        if not positives:
            continue
        relevant = set(positives)
        cosine = {
            int(row): float(value)
            for row, value, valid in zip(
                arrays.candidates[t], arrays.similarity[t], arrays.valid[t], strict=True
            )
            if valid
        }
        pool = [row for row in cosine if row not in relevant]
        hard = tuple(texts[row] for row in pool[:hard_pool])
        other = tuple(texts[row] for row in pool[hard_pool:])
        negatives = tuple(cosine[row] for row in pool)
        # The pool is the most similar memories, so one outside it is at most
        # as similar as the pool's last: it gets that cosine.
        floor = min(cosine.values(), default=0.0)
        for row in positives:
            similarities = (cosine.get(row, floor), *negatives)
            groups.append(
                TrainingGroup(question, texts[row], hard, other, similarities)
            )
    return groups


@dataclasses.dataclass(frozen=True)
class PoolPairs:
    """Every (question, pool candidate) pair of some questions of a conversation.

    Attributes:
      queries: the chosen question indices.
      pairs: the ``(question text, memory text)`` pairs, question-major.
      positions: ``(question index, pool position)`` of each pair.
    """

    queries: np.ndarray
    pairs: list[tuple[str, str]]
    positions: list[tuple[int, int]]


def pool_pairs(stream: LocomoStream, questions: np.ndarray | None = None) -> PoolPairs:
    """The valid pool pairs of the chosen questions, with their ``(t, position)``."""
    arrays, meta = stream.arrays, stream.meta
    texts, queries = meta.memory_texts, meta.query_texts
    chosen = np.flatnonzero(
        np.ones(len(queries), bool) if questions is None else questions
    )
    pairs, positions = [], []
    for t in chosen:
        for position in np.flatnonzero(arrays.valid[t]):
            pairs.append((queries[t], texts[int(arrays.candidates[t, position])]))
            positions.append((int(t), int(position)))
    return PoolPairs(queries=chosen, pairs=pairs, positions=positions)


__all__ = [
    "PoolPairs",
    "assign_folds",
    "conversation_digest",
    "pool_pairs",
    "training_groups",
    "validation_questions",
]
