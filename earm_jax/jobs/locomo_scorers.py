"""The paying scorers of ``earm locomo``: a vLLM server, or one in-process
cross-encoder per trained fold, each behind the score cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from earm_jax.locomo.data import Conversation

if TYPE_CHECKING:
    from earm_jax.jobs.locomo import LocomoJob

CROSS_ENCODER_NOTE = (
    "scores come from the cross-encoder {model} (fold per conversation: {folds}), "
    "a model trained on LoCoMo evidence, run in this process ({backend})"
)

LLM_NOTE = (
    "scores come from the LLM scorer at {url} (model {model}, mode {mode}); a tiny "
    "random-weight test model is real for protocol purposes only, not relevance quality"
)


@dataclasses.dataclass
class PaidScorers:
    """The scorer (through the score cache) for each conversation.

    Attributes:
      for_stream: the cached scorer that scores a stream.
      inner: the scorers that pay (for counters and closing).
      cached: their cache wrappers.
      folds: conversation id -> fold name (cross-encoder folders).
    """

    for_stream: Callable[[Any], Any]
    inner: list[Any]
    cached: list[Any]
    folds: dict[str, str] = dataclasses.field(default_factory=dict)

    def close(self) -> None:
        for scorer in self.inner:
            scorer.close()
        for cached in self.cached:
            cached.cache.close()


def llm_scorers(job: LocomoJob) -> PaidScorers:
    from earm_jax.scoring.cache import CachedScorer, ScoreCache
    from earm_jax.scoring.vllm import VllmScorer, VllmScorerConfig

    scorer = VllmScorer(
        VllmScorerConfig(
            base_url=job.base_url, model=job.scorer_model, mode=job.scorer_mode
        )
    )
    cached = CachedScorer(scorer, ScoreCache(job.score_cache or ":memory:"))
    return PaidScorers(lambda stream: cached, [scorer], [cached])


def cross_encoder_scorers(
    job: LocomoJob, conversations: list[Conversation], embedder: Any
) -> PaidScorers:
    """One in-process cross-encoder per fold folder, chosen per conversation by
    the trained-scorer manifest; a conversation the model trained on is refused
    unless ``allow_in_sample``, and a scorer its manifest measured no better
    than similarity unless ``force_weak_scorer``."""
    from earm_jax.locomo.training_data import conversation_digest
    from earm_jax.scoring.cache import CachedScorer, ScoreCache
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.scoring.scorer_manifest import (
        InSampleError,
        model_scorer,
        open_scorer_folder,
    )
    from earm_jax.store.embeddings import default_cache_dir

    folder = open_scorer_folder(job.scorer_model)
    choices = {
        c.sample_id: folder.choose(conversation_digest(c)) for c in conversations
    }
    in_sample = sorted(sample for sample, choice in choices.items() if choice.in_sample)
    if in_sample and not job.allow_in_sample:
        raise InSampleError(
            f"the scorer {job.scorer_model} was trained on conversation(s) "
            f"{', '.join(in_sample)}: their scores would flatter it (pass "
            "allow_in_sample / --allow-in-sample to score them anyway)"
        )
    folder.check_strength(
        job.force_weak_scorer, "force_weak_scorer / --force-weak-scorer"
    )
    cache = ScoreCache(job.score_cache or default_cache_dir() / "scores.sqlite")
    settings = CrossEncoderSettings(backend=job.scorer_backend)  # type: ignore[arg-type]
    by_folder: dict[str, Any] = {}
    inner = []
    for choice in choices.values():
        key = str(choice.folder)
        if key not in by_folder:
            scorer = model_scorer(choice.folder, settings, embedder)
            inner.append(scorer)
            by_folder[key] = CachedScorer(scorer, cache)
    owner = {
        sample: by_folder[str(choice.folder)] for sample, choice in choices.items()
    }
    folds = {
        sample: (choice.fold or "model") + (" (in sample)" if choice.in_sample else "")
        for sample, choice in choices.items()
    }
    cached = list(by_folder.values())
    return PaidScorers(
        lambda stream: owner[stream.meta.sample_id], inner, cached[:1], folds
    )


def pairs_sent(scorer: Any) -> int:
    counters = getattr(scorer, "counters", None)
    if counters is not None:
        return int(counters.pairs_sent)
    return int(getattr(scorer, "pairs_scored", 0))


__all__ = [
    "CROSS_ENCODER_NOTE",
    "LLM_NOTE",
    "PaidScorers",
    "cross_encoder_scorers",
    "llm_scorers",
    "pairs_sent",
]
