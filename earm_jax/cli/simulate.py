"""``earm simulate``: the seven policies on batched synthetic streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli import output
from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import CallBudget, Preset, Resamples
from earm_jax.jobs.metadata import provenance, write_json

PROFILE_NOTE = (
    "Scorer: answers drawn from a trained scorer's measured profile (by relevance "
    "and similarity rank, with its memory and query correlation), not an LLM"
)
EVIDENCE_NOTE = (
    "Scorer: simulated (truth + noise + miscalibration), not an LLM. "
    "Streams: synthetic (earm_jax.eval.simulate)."
)


def simulate(
    streams: Annotated[int, typer.Option(help="Streams run in parallel (vmap).")] = 16,
    queries: Annotated[int, typer.Option(help="Queries per stream.")] = 100,
    memories: Annotated[int, typer.Option(help="Memories per stream.")] = 2000,
    pool_size: Annotated[int, typer.Option(help="Candidates per query (N).")] = 200,
    rank: Annotated[
        int, typer.Option(help="Rank r of the completion (0 = bias only).")
    ] = 8,
    l2: Annotated[float, typer.Option(help="Ridge penalty lambda.")] = 0.1,
    solver: Annotated[str, typer.Option(help="als | gradient | incremental.")] = "als",
    num_sweeps: Annotated[int, typer.Option(help="ALS sweeps per query.")] = 1,
    budget_scale: Annotated[
        float, typer.Option(help="Multiply the paper's stage budgets by this.")
    ] = 1.0,
    high_fraction: Annotated[
        float, typer.Option(help="High-similarity stratum of the anchor sampler.")
    ] = 0.1,
    scorer_noise: Annotated[float, typer.Option(help="Scorer noise (std).")] = 0.1,
    recurrence: Annotated[
        float, typer.Option(help="Probability a query repeats an earlier need.")
    ] = 0.5,
    semantic_gap: Annotated[
        float, typer.Option(help="Probability a relevant memory looks distant.")
    ] = 0.3,
    wrong_rate: Annotated[
        float, typer.Option(help="Rate of confidently wrong scorer answers.")
    ] = 0.02,
    seed: Annotated[int, typer.Option(help="Seed of streams and anchors.")] = 0,
    resamples: Resamples = 1000,
    preset: Preset = "paper",
    call_budget: CallBudget = 0.25,
    expand: Annotated[
        int,
        typer.Option(
            help="Search expansion: E slots per query for memories outside the "
            "pool with history; adds the policy mixed_expand (0: off)."
        ),
    ] = 0,
    expand_min_score: Annotated[
        float,
        typer.Option(help="--expand: the completion an outside memory needs."),
    ] = 0.0,
    side_information: Annotated[
        int,
        typer.Option(
            "--side-information",
            help="Give memories and queries D-wide text-like embeddings (relevance "
            "partly a planted bilinear function of them; knob side_information "
            "sets the share) and add the policies mixed_side and best_side "
            "(0: off; e.g. 32).",
        ),
    ] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the results JSON here.")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG figure here.")] = None,
    from_json: Annotated[
        Path | None,
        typer.Option(help="Rerun with the config recorded in an earlier JSON."),
    ] = None,
    scorer_profile: Annotated[
        Path | None,
        typer.Option(
            help="Draw the scorer's answers from a measured profile (the "
            "profile-*.json `earm train-scorer` writes) instead of truth + noise; "
            "--scorer-noise and --wrong-rate then have no effect."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No progress lines (stderr).")] = False,
) -> None:
    """Run all seven policies on simulated streams and print policy x metric."""
    from earm_jax.jobs.progress import Progress
    from earm_jax.jobs.simulation import (
        SimulationSettings,
        run_simulation,
        simulation_report,
    )

    console = output.console()
    if from_json is not None:
        settings = _settings_from_json(from_json)
    else:
        with user_errors("fix the option named above (see `earm simulate --help`)"):
            settings = SimulationSettings(
                streams=streams,
                queries=queries,
                memories=memories,
                pool_size=pool_size,
                rank=rank,
                l2=l2,
                solver=solver,
                num_sweeps=num_sweeps,
                budget_scale=budget_scale,
                preset=preset,
                call_budget=call_budget,
                expand=expand,
                expand_min_score=expand_min_score,
                side_information=side_information,
                high_fraction=high_fraction,
                seed=seed,
                num_resamples=resamples,
                knobs=dict(
                    scorer_noise=scorer_noise,
                    recurrence=recurrence,
                    semantic_gap=semantic_gap,
                    wrong_rate=wrong_rate,
                ),
                scorer_profile=_read_profile(scorer_profile),
            )
    progress = Progress(enabled=not quiet)
    progress.note(
        f"running {settings.streams} streams x {settings.queries} queries x 7 "
        "policies as one jitted program (compile included; 30 s-2 min at the "
        "defaults on 2 shared CPU cores) ..."
    )
    progress.phase("simulate", 1)
    metrics, has_relevant, _, timing = run_simulation(settings)
    progress.step("policies run")
    progress.phase("bootstrap", 1)
    summary = simulation_report(settings, metrics, has_relevant)
    progress.step(f"CIs over queries and streams ({settings.num_resamples} resamples)")
    shown = output.shown_metrics(settings.ks)
    console.print(
        output.results_table(
            summary,
            shown,
            f"Simulated streams: {settings.streams} x {settings.queries} queries, "
            f"rank {settings.rank}",
        )
    )
    console.print(output.contrasts_table(summary, shown, "Paired contrasts"))
    saving = summary["call_saving"]
    console.print(
        f"call saving of Mixed vs Full: {saving:.1%}; "
        f"queries: {summary['num_queries']} ({summary['num_scored_queries']} with a "
        f"relevant memory); run {timing['seconds']:.1f} s (compile included)"
    )
    for line in output.expansion_lines(summary):
        console.print(line, markup=False)
    if settings.scorer_profile is not None:
        source = settings.scorer_profile.get("source", {})
        console.print(
            f"{PROFILE_NOTE} (measured on {source.get('measured_on', 'unknown')})",
            markup=False,
        )
    else:
        console.print(EVIDENCE_NOTE, markup=False)
    payload = {
        "config": settings.to_json(),
        "seeds": [settings.seed],
        **provenance(),
        "scorer": "simulated stand-in (not an LLM)"
        if settings.scorer_profile is None
        else "answers drawn from a measured scorer profile",
        "seconds": timing["seconds"],
        **summary,
    }
    if json_path is not None:
        write_json(json_path, payload)
        console.print(f"wrote {json_path}")
    if plot is not None:
        from earm_jax.jobs.plots import policy_figure

        policy_figure(
            metrics,
            has_relevant,
            summary,
            plot,
            block_size=settings.block_size,
            title=f"Simulated streams: {settings.streams} x {settings.queries} "
            f"queries, rank {settings.rank}, {settings.memories} memories, pool "
            f"{settings.pool_size} (simulated scorer, not an LLM)",
        )
        console.print(f"wrote {plot}")


def _read_profile(path: Path | None) -> dict | None:
    """The profile JSON, or a one-line error naming what is wrong."""
    if path is None:
        return None
    from earm_jax.eval.scorer_profile import profile_from_json

    fix = "give a profile-*.json written by `earm train-scorer`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise UserError(
            f"--scorer-profile {str(path)!r} cannot be read: {error}", fix
        ) from error
    with user_errors(fix):
        try:
            profile_from_json(data)
        except ValueError as error:
            raise ValueError(f"--scorer-profile {str(path)!r}: {error}") from error
    return data


def _settings_from_json(path: Path):
    """The settings recorded in an earlier result JSON, or a one-line error."""
    from earm_jax.jobs.simulation import SimulationSettings

    if not path.is_file():
        raise UserError(
            f"--from-json {str(path)!r} does not exist",
            "give a JSON written by `earm simulate --json`",
        )
    try:
        config = json.loads(path.read_text())["config"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise UserError(
            f"--from-json {str(path)!r} is not an `earm simulate` result "
            f"({type(error).__name__}: {error})",
            "give a JSON written by `earm simulate --json`",
        ) from error
    with user_errors("the JSON's config is from another version; rerun without it"):
        try:
            return SimulationSettings.from_json(config)
        except TypeError as error:
            raise ValueError(str(error)) from error


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
