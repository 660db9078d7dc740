"""The job behind ``earm locomo``: grid of settings x noise x rank, seeds averaged."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from earm_jax.eval.budget_match import (
    AUTO,
    MatchedScale,
    match_budget_scale,
    usable_counts,
)
from earm_jax.jobs.locomo_answers import answer_accuracy
from earm_jax.jobs.locomo_recorded import (
    Mix,
    check_recorded,
    load_recorded,
    recorded_note,
    recorded_stream,
    recorded_summary,
)
from earm_jax.jobs.locomo_report import plot_first_run, streams_scorer_quality
from earm_jax.jobs.locomo_scorers import (
    CROSS_ENCODER_NOTE,
    LLM_NOTE,
    PaidScorers,
    cross_encoder_scorers,
    llm_scorers,
    pairs_sent,
)
from earm_jax.jobs.progress import Progress
from earm_jax.locomo.data import Conversation, load_locomo
from earm_jax.locomo.evaluate import (
    LocomoRunSettings,
    PerQuery,
    average_over_seeds,
    evaluate_streams,
    scorer_scores,
    with_scores,
)
from earm_jax.locomo.evidence import STAND_IN_NOTE, EvidenceNoise
from earm_jax.locomo.memories import build_memories
from earm_jax.locomo.pool_order import POOL_ORDERS, in_free_order
from earm_jax.locomo.report import locomo_summary
from earm_jax.locomo.selection import select_conversations
from earm_jax.locomo.streams import LocomoStream, build_streams
from earm_jax.locomo.training_data import conversation_digest
from earm_jax.scoring.replay import ReplayScorer
from earm_jax.settings import EarmSettings

SCORERS = ("evidence", "vllm", "cross-encoder", "recorded")
"""What answers the anchors: the evidence stand-in, a vLLM server, a local
cross-encoder folder (``earm train-scorer`` writes one), or a build's recorded
answers (``earm record-scores`` writes them; nothing is scored)."""

FREE_ORDER_NOTE = (
    "; every pool re-sorted by the free order (cosine + word coverage, no call) "
    "of the recorded build's fold that never saw its conversation, so Semantic "
    "and Top-similarity go down that order"
)


@dataclasses.dataclass(frozen=True)
class LocomoJob:
    """Everything ``earm locomo`` runs (recorded as the JSON's ``config``).

    ``earm`` is the EARM run on each grid point (solver and policy), except
    its ``rank``: the grid ``ranks`` sets it, so ``earm.rank`` must stay at
    its default. ``auto_budget_scale`` finds ``earm.budget_scale`` on the
    conversations (``--budget-scale auto``): the scale at which the anchored
    policies pay ``earm.call_budget`` of Full's calls; ``earm.budget_scale``
    is then not read.
    """

    data: str
    settings: tuple[str, ...] = ("turns",)
    scorer: str = "evidence"
    noises: tuple[float, ...] = (0.1,)
    false_positive_rate: float = 0.0
    false_negative_rate: float = 0.0
    ks: tuple[int, ...] = (10, 20)
    ranks: tuple[int, ...] = (8,)
    seeds: tuple[int, ...] = (0,)
    earm: EarmSettings = EarmSettings()
    pool_size: int = 200
    model: str | None = None
    cache_dir: str | None = None
    base_url: str | None = None
    scorer_model: str | None = None
    scorer_mode: str = "yesno"
    scorer_backend: str = "torch-float32"
    allow_in_sample: bool = False
    force_weak_scorer: bool = False
    score_cache: str | None = None
    answer: bool = False
    answer_base_url: str | None = None
    answer_model: str | None = None
    judge_base_url: str | None = None
    judge_model: str | None = None
    answer_limit: int = 0
    num_resamples: int = 1000
    conversations: tuple[str, ...] = ()
    limit: int = 0
    graded: float = 0.0
    # Not a field of EarmSettings: "auto" is resolved by this job on its
    # conversations (as `earm simulate` resolves it on its streams); what
    # EarmSettings holds is the number it finds.
    auto_budget_scale: bool = False
    scores: tuple[str, ...] = ()
    blend_weight: float = 1.0
    mix: str = ""
    expand: int = 0
    expand_min_score: float = 0.0
    side_information: bool = False
    pool_order: str = "similarity"
    free_order_from: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The job as the JSON's ``config``: one flat record, ``earm``'s fields
        beside the job's own, as every committed result records it.

        ``budget_scale`` is ``"auto"`` when the job finds it, and ``rank`` is
        left out (the grid ``ranks`` is recorded).
        """
        own = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in ("earm", "auto_budget_scale")
        }
        earm = dataclasses.asdict(self.earm)
        del earm["rank"]
        if self.auto_budget_scale:
            earm["budget_scale"] = AUTO
        return {**own, **earm}

    def validate(self) -> None:
        """Raises ``ValueError`` naming the first bad field."""
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS}, got {self.scorer!r}")
        from earm_jax.scoring.cross_encoder import BACKENDS

        if self.scorer_backend not in BACKENDS:
            raise ValueError(
                f"scorer_backend must be one of {', '.join(BACKENDS)}, got "
                f"{self.scorer_backend!r}"
            )
        if self.scorer not in ("evidence", "recorded") and not self.scorer_model:
            raise ValueError(f"scorer {self.scorer!r} needs scorer_model")
        if (self.scorer == "recorded") != bool(self.scores):
            raise ValueError(
                "scores (recorded-answers files) go with scorer 'recorded' and only "
                f"with it; got scorer {self.scorer!r} and scores {self.scores!r}"
            )
        if not 0.0 <= self.blend_weight <= 1.0:
            raise ValueError(
                f"blend_weight must be in [0, 1], got {self.blend_weight!r}"
            )
        Mix.parse(self.mix)
        if self.mix and self.scorer != "recorded":
            raise ValueError("mix moves recorded answers: it needs scorer 'recorded'")
        if self.pool_order not in POOL_ORDERS:
            raise ValueError(
                f"pool_order must be one of {POOL_ORDERS}, got {self.pool_order!r}"
            )
        if self.pool_order == "free" and not (
            self.scorer == "recorded" or self.free_order_from
        ):
            raise ValueError(
                "pool_order 'free' reads each fold's free order from recorded "
                "answers: give free_order_from (a recorded-answers file per "
                "setting), or use scorer 'recorded'"
            )
        if self.free_order_from and self.pool_order != "free":
            raise ValueError("free_order_from is read only with pool_order 'free'")
        if not isinstance(self.earm, EarmSettings):
            raise ValueError(
                f"earm must be an EarmSettings, got {type(self.earm).__name__}"
            )
        if self.earm.rank != EarmSettings.rank:
            raise ValueError(
                f"LocomoJob.earm.rank={self.earm.rank} is not read: the job runs "
                f"each rank of its grid; pass ranks=({self.earm.rank},)"
            )
        if not self.settings:
            raise ValueError("settings must name turns and/or observations")
        if not self.ks or any(k < 1 for k in self.ks):
            raise ValueError(f"ks must be positive, got {self.ks}")
        if not self.ranks or any(r < 0 for r in self.ranks):
            raise ValueError(f"ranks must be >= 0, got {self.ranks}")
        if not self.seeds:
            raise ValueError("seeds must not be empty")
        if self.pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {self.pool_size}")
        if self.limit < 0:
            raise ValueError(f"limit must be >= 0 (0 = all), got {self.limit}")
        for noise in self.noises:
            EvidenceNoise(
                noise,
                self.false_positive_rate,
                self.false_negative_rate,
                graded=self.graded,
            )
        self.run_settings(self.ranks[0])  # preset and call budget

    def run_settings(
        self, rank: int, budget_scale: float | None = None
    ) -> LocomoRunSettings:
        """The run's settings at ``rank``; ``budget_scale`` replaces
        ``earm.budget_scale`` (the one :func:`matched_scale` finds)."""
        if budget_scale is None:
            budget_scale = 1.0 if self.auto_budget_scale else self.earm.budget_scale
        return LocomoRunSettings(
            **{
                **self.earm.earm_fields(),
                "rank": rank,
                "budget_scale": float(budget_scale),
            },
            ks=self.ks,
            expand=self.expand,
            expand_min_score=self.expand_min_score,
            side_information=self.side_information,
        )


def _embed_conversations(
    conversations: list[Conversation], settings: tuple[str, ...], embedder, progress
) -> None:
    """Embeds (and caches) every conversation's texts, one progress line each,
    so the grid below reads the cache only."""
    progress.note(
        f"embedding {len(conversations)} conversation(s) with {embedder.identity} "
        "(cached: a first run loads the model and takes minutes, later runs "
        "seconds)"
    )
    progress.phase("embedding", len(conversations) * len(settings))
    for setting in settings:
        for conversation in conversations:
            memory_set = build_memories(conversation, setting)
            texts = [q.question for q in memory_set.queries]
            texts += [m.text for m in memory_set.memories]
            embedder.embed(texts)
            progress.step(
                f"conversation {conversation.sample_id} ({setting}: "
                f"{len(memory_set.memories)} memories, "
                f"{len(memory_set.queries)} questions)"
            )


def run_locomo_job(
    job: LocomoJob,
    on_step: Callable[[str], Any] | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], PerQuery]:
    """Runs the grid.

    Args:
      job: what to run.
      on_step: called with a description after each step (older hook).
      progress: prints a line per conversation embedded and per grid point
        run, with an ETA (default: silent).

    Returns:
      ``(JSON payload, per-query results of the first grid point)``.
    """

    job.validate()
    conversations = select_conversations(
        load_locomo(job.data), job.conversations, job.limit
    )
    paid = None
    recorded = None
    digests = {c.sample_id: conversation_digest(c) for c in conversations}
    if job.scorer == "recorded":
        recorded = load_recorded(job.scores)
        check_recorded(recorded, job.settings, digests)
    free_orders = _free_orders(job, recorded, digests)
    if job.scorer == "vllm":
        paid = llm_scorers(job)
    elif job.scorer == "cross-encoder":
        from earm_jax.store.embeddings import Embedder

        embedder = Embedder(job.model, cache_dir=job.cache_dir)
        paid = cross_encoder_scorers(job, conversations, embedder)
    try:
        return _run_grid(
            job,
            conversations,
            on_step,
            paid,
            progress or Progress(enabled=False),
            recorded,
            free_orders,
        )
    finally:
        if paid is not None:
            paid.close()


def _free_orders(
    job: LocomoJob, recorded: dict[str, Any] | None, digests: dict[str, str]
) -> dict[str, Any] | None:
    """The recorded answers whose folds' free orders re-sort the pools (each
    conversation goes down the free order of the fold that never saw it,
    whatever scores it), checked against the data; ``None`` for the
    similarity order."""
    if job.pool_order != "free":
        return None
    orders = load_recorded(job.free_order_from) if job.free_order_from else recorded
    assert orders is not None  # validate(): recorded, or free_order_from
    check_recorded(orders, job.settings, digests)
    for setting in job.settings:
        for sample_id in digests:
            orders[setting].free_order_of(sample_id)
    return orders


def _run_grid(
    job: LocomoJob,
    conversations: list[Conversation],
    on_step: Callable[[str], Any] | None,
    paid: PaidScorers | None,
    progress: Progress,
    recorded: dict[str, Any] | None = None,
    free_orders: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], PerQuery]:
    from earm_jax.jobs.metadata import provenance
    from earm_jax.store.embeddings import Embedder

    step = on_step or (lambda _: None)
    embedder = Embedder(job.model, cache_dir=job.cache_dir)
    _embed_conversations(conversations, job.settings, embedder, progress)
    runs: list[dict[str, Any]] = []
    faults: list[dict[str, str]] = []
    seen_faults: set[tuple[str, str, str]] = set()
    first: PerQuery | None = None
    answers: dict[str, Any] | None = None
    scorer_failures: dict[str, int] = {}
    matched: dict[str, MatchedScale] = {}
    replays = (
        {s: ReplayScorer.from_recorded(a) for s, a in recorded.items()}
        if recorded
        else {}
    )
    mix = Mix.parse(job.mix)
    step("embedding conversations")
    noises: tuple[float | None, ...] = (
        job.noises if job.scorer == "evidence" else (None,)
    )
    points = len(job.settings) * len(noises) * len(job.ranks) * len(job.seeds)
    progress.note(
        f"running {points} grid point(s) x the policies of preset {job.earm.preset} "
        f"on {len(conversations)} conversation(s); the first point compiles "
        "(~30-60 s on 2 CPU cores)"
    )
    progress.phase("grid", points)
    for setting in job.settings:
        for noise in noises:
            for rank in job.ranks:
                run_settings = job.run_settings(rank)
                if job.auto_budget_scale:
                    if setting not in matched:
                        matched[setting] = matched_scale(
                            build_streams(
                                conversations,
                                embedder,
                                setting=setting,
                                pool_size=job.pool_size,
                            ),
                            run_settings,
                            job.pool_size,
                        )
                        progress.note(
                            f"  budget scale {matched[setting].scale:.4f} puts the "
                            f"anchored policies at {matched[setting].share:.1%} of "
                            f"Full's calls ({setting}, cap {job.earm.call_budget:.0%})"
                        )
                    run_settings = job.run_settings(rank, matched[setting].scale)
                per_seed = []
                quality = None
                for seed in job.seeds:
                    knobs = EvidenceNoise(
                        noise if noise is not None else 0.0,
                        job.false_positive_rate,
                        job.false_negative_rate,
                        seed,
                        graded=job.graded,
                    )
                    streams = build_streams(
                        conversations,
                        embedder,
                        setting=setting,
                        pool_size=job.pool_size,
                        knobs=knobs,
                    )
                    if recorded:
                        rescored = []
                        for stream in streams:
                            stream, failures = recorded_stream(
                                stream,
                                recorded[setting],
                                replays[setting],
                                job.blend_weight,
                                mix,
                            )
                            for reason, count in failures.items():
                                scorer_failures[reason] = (
                                    scorer_failures.get(reason, 0) + count
                                )
                            rescored.append(stream)
                        streams = rescored
                    if paid is not None:
                        rescored = []
                        for stream in streams:
                            cached = paid.for_stream(stream)
                            scores, failures = scorer_scores(stream, cached)
                            progress.note(
                                f"  scored conversation {stream.meta.sample_id}: "
                                f"{int(np.sum(stream.arrays.valid))} pairs "
                                f"(cache hits so far: {cached.counters.hits})"
                            )
                            for reason, count in failures.items():
                                scorer_failures[reason] = (
                                    scorer_failures.get(reason, 0) + count
                                )
                            rescored.append(with_scores(stream, scores))
                        streams = rescored
                    if free_orders:
                        # After scoring: each answer moves with its candidate.
                        streams = [
                            in_free_order(
                                stream,
                                free_orders[setting].free_order_of(
                                    stream.meta.sample_id
                                ),
                            )
                            for stream in streams
                        ]
                    for stream in streams:
                        for fault in stream.meta.faults:
                            key = (fault.conversation, fault.kind, fault.detail)
                            if key not in seen_faults:
                                seen_faults.add(key)
                                faults.append(dataclasses.asdict(fault))
                    if quality is None:
                        quality = streams_scorer_quality(streams, job.ks)
                    per_seed.append(evaluate_streams(streams, run_settings, seed))
                    step(f"{setting} noise={noise} rank={rank} seed={seed}")
                    progress.step(
                        f"{setting}, noise {noise}, rank {rank}, seed {seed}: "
                        f"{len(streams)} conversations, preset {job.earm.preset}"
                    )
                    if job.answer and answers is None:
                        answers = answer_accuracy(job, streams, run_settings, seed)
                per_query = average_over_seeds(per_seed)
                if first is None:
                    first = per_query
                summary = locomo_summary(per_query, job.num_resamples, job.seeds[0])
                runs.append(
                    {
                        "setting": setting,
                        "noise": noise,
                        "rank": rank,
                        **summary,
                        "scorer_quality": quality,
                    }
                )
    if job.scorer == "evidence":
        note = STAND_IN_NOTE
    elif job.scorer == "recorded":
        assert recorded is not None
        note = recorded_note(job.scores, recorded, job.blend_weight, mix)
    elif job.scorer == "cross-encoder":
        assert paid is not None
        note = CROSS_ENCODER_NOTE.format(
            model=job.scorer_model,
            folds=", ".join(f"{k}: {v}" for k, v in paid.folds.items()),
            backend=job.scorer_backend,
        )
    else:
        note = LLM_NOTE.format(
            url=job.base_url, model=job.scorer_model, mode=job.scorer_mode
        )
    if free_orders:
        note += FREE_ORDER_NOTE
    payload: dict[str, Any] = {
        "config": job.to_json(),
        "seeds": list(job.seeds),
        **provenance(),
        "scorer_note": note,
        "embedding_model": embedder.identity,
        **{k: v for k, v in runs[0].items() if k not in ("setting", "noise", "rank")},
        "runs": runs,
        "data_faults": faults,
    }
    if matched:
        payload["budget_scale_matched"] = {
            setting: dataclasses.asdict(value) for setting, value in matched.items()
        }
    if recorded:
        payload["recorded_answers"] = recorded_summary(recorded)
        payload["scorer_counters"] = {
            "pairs_sent": 0,
            "failed_pairs_by_reason": scorer_failures,
            "cache_hits": 0,
        }
    if paid is not None:
        payload["scorer_counters"] = {
            "pairs_sent": sum(pairs_sent(scorer) for scorer in paid.inner),
            "failed_pairs_by_reason": scorer_failures,
            "cache_hits": sum(cached.counters.hits for cached in paid.cached),
        }
        if paid.folds:
            payload["scorer_folds"] = paid.folds
    if answers is not None:
        payload["answers"] = answers
    assert first is not None
    return payload, first


def matched_scale(
    streams: list[LocomoStream], settings: LocomoRunSettings, pool_size: int
) -> MatchedScale:
    """The budget scale at which the anchored policies pay ``call_budget`` of
    Full's calls on these conversations (``--budget-scale auto``)."""
    return match_budget_scale(
        settings.call_budget,
        [
            usable_counts(s.arrays.candidates, s.arrays.valid, s.arrays.insert_time)
            for s in streams
        ],
        pool_size,
        settings.block_size,
        settings.stage_ratios,
    )


__all__ = [
    "LocomoJob",
    "matched_scale",
    "plot_first_run",
    "run_locomo_job",
    "streams_scorer_quality",
]
