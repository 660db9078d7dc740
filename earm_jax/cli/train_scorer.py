"""``earm train-scorer``: fine-tune a relevance cross-encoder on LoCoMo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import user_errors
from earm_jax.cli.locomo import resolve_data
from earm_jax.cli.options import (
    BUILD_SCORER_BACKEND,
    BuildScorerBackend,
    CacheDir,
    Conversations,
    Limit,
    LocomoData,
    Quiet,
    ScorerDtype,
    comma_names,
    given_scorer_backend,
)


def train_scorer(
    out: Annotated[
        Path, typer.Option(help="Output folder (new or empty; see --resume).")
    ],
    data: LocomoData = None,
    memories: Annotated[
        str,
        typer.Option(help="Memory settings whose pairs train it: turns, observations."),
    ] = "turns",
    conversations: Conversations = "",
    limit: Limit = 0,
    folds: Annotated[
        int,
        typer.Option(
            help="1: one model on all it is given; K > 1: K models on disjoint "
            "groups of conversations (cross-fitting), each scoring the ones it "
            "never saw."
        ),
    ] = 1,
    base_model: Annotated[
        Path | None,
        typer.Option(help="BERT-like folder to start from (default: bundled MiniLM)."),
    ] = None,
    layers: Annotated[
        int,
        typer.Option(
            help="Keep the base model's first N transformer layers (0: all). "
            "Fewer score faster and rank worse: MiniLM's 2 of 6 scored 3x as "
            "fast and lost 0.066 of Full's Recall@10 on LoCoMo turns "
            "(docs/trained-scorer.md, 'A smaller model')."
        ),
    ] = 0,
    epochs: Annotated[
        float, typer.Option(help="Passes over the training groups.")
    ] = 2.0,
    group_size: Annotated[
        int, typer.Option(help="Memories per group: 1 relevant + negatives.")
    ] = 16,
    hard_negatives: Annotated[
        int, typer.Option(help="Negatives per group from the most similar ones.")
    ] = 5,
    hard_pool: Annotated[
        int, typer.Option(help="How many most-similar non-evidence count as hard.")
    ] = 20,
    learning_rate: Annotated[float, typer.Option(help="Peak AdamW rate.")] = 4e-5,
    warmup_fraction: Annotated[
        float,
        typer.Option(
            help="Share of the steps spent warming the rate up (linearly), "
            "in [0, 1); it then decays linearly to 0."
        ),
    ] = 0.1,
    residual_weight: Annotated[
        float,
        typer.Option(
            help="Train on similarity's residual: the loss ranks logit + W x "
            "the retriever's cosine (0: the logit alone); the blend fitted "
            "afterwards weighs the cosine back in."
        ),
    ] = 0.0,
    hardest_share: Annotated[
        float,
        typer.Option(
            help="After the first pass over every group, train only on this "
            "share of them: those whose evidence the model then ranks worst "
            "among its hard negatives (1: every pass over all groups)."
        ),
    ] = 1.0,
    word_coverage: Annotated[
        bool,
        typer.Option(
            help="The similarity blend also weighs how much of the question's "
            "rarer words the memory repeats (stemmed, weighted by wordfreq's "
            "English frequencies)."
        ),
    ] = True,
    max_length: Annotated[int, typer.Option(help="Tokens per pair.")] = 256,
    precision: Annotated[
        str,
        typer.Option(
            help="Training compute: auto (bfloat16 where the CPU has it natively, "
            "else float32), bfloat16 or float32."
        ),
    ] = "auto",
    scorer_backend: BuildScorerBackend = None,
    scorer_dtype: ScorerDtype = None,
    max_steps: Annotated[
        int,
        typer.Option(
            help="Stop after this many steps (0: no cap): the time budget. 500 "
            "steps take ~25-30 min on 2 cores with native bfloat16, ~60 min in "
            "float32 on AVX2-only cores (200: ~27 min there)."
        ),
    ] = 500,
    seed: Annotated[int, typer.Option(help="Seed of sampling and training.")] = 0,
    score_cache: Annotated[
        Path | None,
        typer.Option(
            help="SQLite score cache (default: $EARM_CACHE_DIR/scores.sqlite)."
        ),
    ] = None,
    cache_dir: CacheDir = None,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue a stopped build in --out (every other option as it "
            "was): finished folds are kept, written models are not retrained."
        ),
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Fine-tune a cross-encoder from MiniLM on LoCoMo (question, memory,
    evidence) pairs; write the model folder(s), a manifest and scorer profiles."""
    from earm_jax.jobs.progress import Progress
    from earm_jax.jobs.train_scorer import run_train_scorer
    from earm_jax.jobs.train_scorer_job import TrainScorerJob, stopped_backend
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.scoring.cross_encoder_training import (
        TrainingSettings,
        resolve_precision,
    )

    data = resolve_data(data)
    backend = (
        given_scorer_backend(scorer_backend, scorer_dtype)
        or (stopped_backend(out) if resume else None)
        or BUILD_SCORER_BACKEND
    )
    with user_errors("fix the option named above (see `earm train-scorer --help`)"):
        job = TrainScorerJob(
            data=str(data),
            out=str(out),
            settings=comma_names(memories),
            conversations=comma_names(conversations),
            limit=limit,
            folds=folds,
            base_model=str(base_model) if base_model else None,
            hard_pool=hard_pool,
            word_coverage=word_coverage,
            scoring=CrossEncoderSettings(backend=backend, max_length=max_length),  # type: ignore[arg-type]
            training=TrainingSettings(
                epochs=epochs,
                group_size=group_size,
                hard_negatives=hard_negatives,
                learning_rate=learning_rate,
                warmup_fraction=warmup_fraction,
                max_length=max_length,
                precision=resolve_precision(precision),  # type: ignore[arg-type]
                max_steps=max_steps,
                seed=seed,
                layers=layers,
                residual_weight=residual_weight,
                hardest_share=hardest_share,
            ),
            cache_dir=str(cache_dir) if cache_dir else None,
            score_cache=str(score_cache) if score_cache else None,
            resume=resume,
        )
        job.validate()
    with user_errors(
        "install the extra: pip install 'earm_jax[embed]'", ModuleNotFoundError
    ):
        with user_errors("check --data, --conversations and --folds"):
            manifest = run_train_scorer(job, Progress(enabled=not quiet))

    def number(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for fold in manifest["folds"]:
        quality = fold.get("held_out_quality") or fold.get("held_back_quality", {})
        where = "held out" if fold.get("held_out_quality") else "held-back questions"
        for setting, row in quality.items():
            recall = row["recall@10"]
            typer.echo(
                f"{fold['name']} ({where}, {setting}): AUC {number(row['auc'])}, "
                f"Full Recall@10 {number(recall['full'])} vs Semantic "
                f"{number(recall['semantic'])} (oracle {number(recall['oracle'])})"
            )
    for setting, row in manifest.get("cross_fitted_quality", {}).items():
        recall = row["recall@10"]
        typer.echo(
            f"cross-fitted ({setting}, {row['queries']} questions): AUC "
            f"{row['auc']:.3f}, Full Recall@10 {recall['full']:.3f} vs Semantic "
            f"{recall['semantic']:.3f} ({recall['full_minus_semantic']:+.3f}), "
            f"ECE {row['reliability']['ece']:.3f}"
        )
    typer.echo(f"wrote {out} ({len(manifest['folds'])} fold(s), manifest.json)")


def register(app: typer.Typer) -> None:
    app.command(
        "train-scorer", short_help="Fine-tune a cross-encoder on LoCoMo evidence."
    )(train_scorer)


__all__ = ["register"]
