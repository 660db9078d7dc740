"""``earm simulate``: the seven policies on batched synthetic streams."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli import output
from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import (
    DEFAULTS,
    CallBudget,
    CallOrder,
    Expand,
    ExpandMinScore,
    HighFraction,
    JsonPath,
    NumSweeps,
    Plot,
    PoolSize,
    Preset,
    Quiet,
    Resamples,
    Solver,
    StopRule,
)
from earm_jax.eval.budget_match import AUTO
from earm_jax.eval.simulate import SimKnobs
from earm_jax.jobs.metadata import provenance, write_json
from earm_jax.jobs.simulation import SimulationSettings

PROFILE_NOTE = (
    "Scorer: answers drawn from a trained scorer's measured profile (by relevance "
    "and similarity rank, with its memory and query correlation), not an LLM"
)
_SIMULATION = SimulationSettings()
"""The defaults of every option, from the settings the job records."""
_KNOBS = SimKnobs._field_defaults

EVIDENCE_NOTE = (
    "Scorer: simulated (truth + noise + miscalibration), not an LLM. "
    "Streams: synthetic (earm_jax.eval.simulate)."
)


def simulate(
    streams: Annotated[
        int, typer.Option(help="Streams run in parallel (vmap).")
    ] = _SIMULATION.streams,
    queries: Annotated[
        int, typer.Option(help="Queries per stream.")
    ] = _SIMULATION.queries,
    memories: Annotated[
        int, typer.Option(help="Memories per stream.")
    ] = _SIMULATION.memories,
    pool_size: PoolSize = _SIMULATION.pool_size,
    rank: Annotated[
        int, typer.Option(help="Rank r of the completion (0 = bias only).")
    ] = DEFAULTS.rank,
    l2: Annotated[float, typer.Option(help="Ridge penalty lambda.")] = DEFAULTS.l2,
    solver: Solver = DEFAULTS.solver,
    num_sweeps: NumSweeps = DEFAULTS.num_sweeps,
    budget_scale: Annotated[
        str,
        typer.Option(
            help="Multiply the paper's stage budgets by this, or auto: the scale "
            "at which the anchored policies pay --call-budget of Full's calls on "
            "these streams (compare every policy at equal calls)."
        ),
    ] = str(DEFAULTS.budget_scale),
    high_fraction: HighFraction = DEFAULTS.high_fraction,
    noise: Annotated[
        float, typer.Option(help="Scorer noise (std of the simulated answers).")
    ] = _KNOBS["scorer_noise"],
    scorer_noise: Annotated[
        float | None,
        typer.Option(hidden=True, help="Deprecated name of --noise."),
    ] = None,
    recurrence: Annotated[
        float, typer.Option(help="Probability a query repeats an earlier need.")
    ] = _KNOBS["recurrence"],
    semantic_gap: Annotated[
        float, typer.Option(help="Probability a relevant memory looks distant.")
    ] = _KNOBS["semantic_gap"],
    wrong_rate: Annotated[
        float, typer.Option(help="Rate of confidently wrong scorer answers.")
    ] = _KNOBS["wrong_rate"],
    seed: Annotated[
        int, typer.Option(help="Seed of streams and anchors.")
    ] = _SIMULATION.seed,
    resamples: Resamples = _SIMULATION.num_resamples,
    preset: Preset = DEFAULTS.preset,
    call_budget: CallBudget = DEFAULTS.call_budget,
    call_order: CallOrder = _SIMULATION.call_order,
    stop_rule: StopRule = DEFAULTS.stop_rule,
    expand: Expand = _SIMULATION.expand,
    expand_min_score: ExpandMinScore = _SIMULATION.expand_min_score,
    side_information: Annotated[
        int,
        typer.Option(
            "--side-information",
            help="Give memories and queries D-wide text-like embeddings (relevance "
            "partly a planted bilinear function of them; knob side_information "
            "sets the share) and add the policies mixed_side, mixed_fused, "
            "best_side and learned_calls (0: off; e.g. 32).",
        ),
    ] = 0,
    json_path: JsonPath = None,
    plot: Plot = None,
    from_json: Annotated[
        Path | None,
        typer.Option(help="Rerun with the config recorded in an earlier JSON."),
    ] = None,
    scorer_profile: Annotated[
        Path | None,
        typer.Option(
            help="Draw the scorer's answers from a measured profile (the "
            "profile-*.json `earm train-scorer` writes, or the one a "
            "recorded-answers .npz of `earm record-scores` carries) instead of "
            "truth + noise; --noise and --wrong-rate then have no effect."
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Run the paper's seven policies (--preset best adds best) on simulated
    streams and print policy x metric."""
    from earm_jax.jobs.progress import Progress
    from earm_jax.jobs.simulation import (
        SimulationSettings,
        run_simulation,
        simulation_report,
    )

    console = output.console()
    if scorer_noise is not None:
        # The old name, kept working for scripts written before --noise.
        print("note: --scorer-noise is deprecated; use --noise", file=sys.stderr)
        noise = scorer_noise
    auto = budget_scale.strip() == AUTO
    if auto and from_json is not None:
        raise UserError(
            "--budget-scale auto with --from-json: the JSON records the scale",
            "drop --budget-scale; --from-json reruns the recorded one",
        )
    scale = 1.0 if auto else _budget_scale(budget_scale)
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
                budget_scale=scale,
                preset=preset,
                call_budget=call_budget,
                call_order=call_order,
                stop_rule=stop_rule,
                expand=expand,
                expand_min_score=expand_min_score,
                side_information=side_information,
                high_fraction=high_fraction,
                seed=seed,
                num_resamples=resamples,
                knobs=dict(
                    scorer_noise=noise,
                    recurrence=recurrence,
                    semantic_gap=semantic_gap,
                    wrong_rate=wrong_rate,
                ),
                scorer_profile=_read_profile(scorer_profile),
            )
    progress = Progress(enabled=not quiet)
    matched = None
    if auto:
        from earm_jax.jobs.simulation import matched_budget_scale

        matched = matched_budget_scale(settings)
        settings = dataclasses.replace(settings, budget_scale=matched.scale)
        progress.note(
            f"budget scale {matched.scale:.4f} puts the anchored policies at "
            f"{matched.share:.1%} of Full's calls (cap {settings.call_budget:.0%})"
        )
    progress.note(
        f"running {settings.streams} streams x {settings.queries} queries, the "
        f"policies of preset {settings.preset}, as one jitted program (compile "
        "included; 30 s-2 min at the defaults on 2 shared CPU cores) ..."
    )
    progress.phase("simulate", 1)
    metrics, has_relevant, _, timing = run_simulation(settings)
    progress.step("policies run")
    progress.phase("bootstrap", 1)
    summary = simulation_report(settings, metrics, has_relevant)
    progress.step(f"CIs over queries and streams ({settings.num_resamples} resamples)")
    shown = output.shown_metrics(settings.ks)
    saving = summary["call_saving"]
    notes = [
        f"call saving of Mixed vs Full: {saving:.1%}; "
        f"queries: {summary['num_queries']} ({summary['num_scored_queries']} "
        f"with a relevant memory); run {timing['seconds']:.1f} s (compile "
        "included)"
    ]
    tie = settings.queries <= settings.block_size and output.tie_note(
        summary,
        f"with --queries {settings.queries} every query is in the schedule's "
        f"first stage (its first {settings.block_size} queries)",
        f"raise --queries above {settings.block_size} to see them part",
    )
    output.print_summary(
        console,
        summary,
        shown,
        f"Simulated streams: {settings.streams} x {settings.queries} queries, "
        f"rank {settings.rank}",
        notes=notes,
        why=tie or None,
    )
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
    if matched is not None:
        payload["budget_scale_matched"] = dataclasses.asdict(matched)
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


def _budget_scale(text: str) -> float:
    try:
        return float(text)
    except ValueError as error:
        raise UserError(
            f"--budget-scale must be a number or auto, got {text!r}",
            "e.g. --budget-scale 0.57, or auto to match --call-budget",
        ) from error


def _read_profile(path: Path | None) -> dict | None:
    """The profile JSON (or a recorded-answers file's), or a one-line error
    naming what is wrong."""
    if path is None:
        return None
    from earm_jax.eval.scorer_profile import profile_from_json

    fix = (
        "give a profile-*.json written by `earm train-scorer` or a *-scores.npz "
        "written by `earm record-scores`"
    )
    if path.suffix == ".npz":
        from earm_jax.scoring.recorded_answers import RecordedAnswers

        with user_errors(fix):
            data = RecordedAnswers.load(path).profile
        if data is None:
            raise UserError(
                f"--scorer-profile {str(path)!r} carries no profile (recorded "
                "before profiles were kept, or too few answers of a class)",
                "record it again with `earm record-scores`",
            )
    else:
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
    app.command(
        "simulate", short_help="Run the paper's seven policies on simulated streams."
    )(simulate)
