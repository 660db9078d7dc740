"""``earm record-scores``: a cross-fitted build's answers in one small file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.locomo import resolve_data
from earm_jax.cli.options import CacheDir, LocomoData, Quiet


def record_scores(
    out: Annotated[
        Path,
        typer.Option(
            help="The .npz to write (name it *scores*.npz; a few MB for all of "
            "LoCoMo's turns)."
        ),
    ],
    scorer_model: Annotated[
        Path | None,
        typer.Option(help="The folder `earm train-scorer --folds K` wrote."),
    ] = None,
    refit_profile: Annotated[
        Path | None,
        typer.Option(
            help="Instead of a build: a recorded-answers file whose scorer "
            "profile is measured again from its own answers (no model, no "
            "score cache) and written with them to --out; for files recorded "
            "before profiles kept each relevant answer's standing."
        ),
    ] = None,
    data: LocomoData = None,
    memories: Annotated[
        str, typer.Option(help="The memory setting to record: turns, observations.")
    ] = "turns",
    score_cache: Annotated[
        Path | None,
        typer.Option(help="The score cache the build wrote to (default: its own)."),
    ] = None,
    cache_dir: CacheDir = None,
    quiet: Quiet = False,
) -> None:
    """Write a build's answers on every conversation it held out (question x
    pool candidate -> the model's own logit, float16, with text digests and no
    text), read from its score cache: `earm locomo --scorer recorded --scores
    FILE` replays them with no model."""
    from earm_jax.jobs.record_answers import RecordJob, record_answers
    from earm_jax.scoring.recorded_answers import describe

    if (scorer_model is None) == (refit_profile is None):
        raise UserError(
            "give --scorer-model (a build) or --refit-profile (a recorded file), "
            "not both",
            "earm record-scores --scorer-model BUILD --out FILE",
        )
    data = resolve_data(data)
    if refit_profile is not None:
        _refit(refit_profile, data, cache_dir, out)
        return
    job = RecordJob(
        scorer_folder=str(scorer_model),
        data=str(data),
        setting=memories,
        score_cache=str(score_cache) if score_cache else None,
        cache_dir=str(cache_dir) if cache_dir else None,
    )
    with user_errors(
        "install the extra: pip install 'earm_jax[embed]'", ModuleNotFoundError
    ):
        with user_errors("check --scorer-model, --data and --score-cache"):
            recorded, missing = record_answers(job)
            recorded.save(out)
    summary = describe(recorded)
    if recorded.manifest.get("complete") is False:
        typer.echo(
            "a stopped build: only the conversations its finished folds held out "
            f"are recorded ({', '.join(summary['conversations'])})"
        )
    if not quiet:
        lacking = sum(missing.values())
        typer.echo(
            f"{summary['questions']} questions of {len(summary['conversations'])} "
            f"conversation(s), {summary['scored_pairs']} pairs "
            f"({lacking} not in the cache), {summary['backend']} "
            f"{summary['precision']}"
        )
    typer.echo(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


def _refit(source: Path, data: Path, cache_dir: Path | None, out: Path) -> None:
    from earm_jax.jobs.record_answers import refit_profile

    with user_errors(
        "install the extra: pip install 'earm_jax[embed]'", ModuleNotFoundError
    ):
        with user_errors("check --refit-profile and --data"):
            recorded = refit_profile(
                str(source), str(data), str(cache_dir) if cache_dir else None
            )
            recorded.save(out)
    typer.echo(
        f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): the answers of "
        f"{source.name}, profile {recorded.profile['format']}"
    )


def register(app: typer.Typer) -> None:
    app.command(
        "record-scores", short_help="Record a build's answers, to replay with no model."
    )(record_scores)


__all__ = ["register"]
