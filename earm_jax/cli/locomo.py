"""``earm locomo``: the seven policies on real LoCoMo conversations."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from earm_jax.cli import output
from earm_jax.jobs.metadata import write_json


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise typer.BadParameter(
            f"{name} must be comma-separated numbers, got {text!r}"
        ) from error


def _ints(text: str, name: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise typer.BadParameter(
            f"{name} must be comma-separated integers, got {text!r}"
        ) from error


def locomo(
    data: Annotated[
        Path | None,
        typer.Option(
            help="locomo10.json or a folder of per-conversation files "
            "(default: $EARM_LOCOMO_DATA)."
        ),
    ] = None,
    memories: Annotated[
        str, typer.Option(help="Memory settings: turns, observations (comma list).")
    ] = "turns",
    scorer: Annotated[
        str, typer.Option(help="evidence (stand-in) or vllm.")
    ] = "evidence",
    noise: Annotated[
        str, typer.Option(help="Evidence scorer noise (comma list).")
    ] = "0.1",
    false_positive_rate: Annotated[
        float, typer.Option(help="Evidence scorer FP rate.")
    ] = 0.0,
    false_negative_rate: Annotated[
        float, typer.Option(help="Evidence scorer FN rate.")
    ] = 0.0,
    top_k: Annotated[str, typer.Option(help="K values (comma list).")] = "10,20",
    rank: Annotated[str, typer.Option(help="Ranks (comma list).")] = "8",
    seeds: Annotated[
        str, typer.Option(help="Seeds of anchors and scorer noise.")
    ] = "0",
    solver: Annotated[str, typer.Option(help="als | gradient | incremental.")] = "als",
    num_sweeps: Annotated[int, typer.Option(help="ALS sweeps per query.")] = 3,
    high_fraction: Annotated[float, typer.Option(help="Anchor stratum size.")] = 0.1,
    pool_size: Annotated[int, typer.Option(help="Candidates per query (N).")] = 200,
    model: Annotated[
        Path | None, typer.Option(help="sentence-transformers folder (default MiniLM).")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Embedding cache (default $EARM_CACHE_DIR).")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="vLLM server for --scorer vllm.")
    ] = None,
    scorer_model: Annotated[str | None, typer.Option(help="Served model name.")] = None,
    scorer_mode: Annotated[
        str, typer.Option(help="yesno | rerank | chat | text.")
    ] = "yesno",
    score_cache: Annotated[
        Path | None, typer.Option(help="SQLite score cache for --scorer vllm.")
    ] = None,
    answer: Annotated[
        bool,
        typer.Option(help="Generate answers from the top-K context and judge them."),
    ] = False,
    answer_base_url: Annotated[str | None, typer.Option(help="Answering LLM.")] = None,
    answer_model: Annotated[str | None, typer.Option(help="Answering model.")] = None,
    judge_base_url: Annotated[
        str | None, typer.Option(help="Judge (default: answerer).")
    ] = None,
    judge_model: Annotated[str | None, typer.Option(help="Judge model.")] = None,
    answer_limit: Annotated[
        int, typer.Option(help="Answer at most this many queries (0 = all).")
    ] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 1000,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write JSON here.")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG here.")] = None,
) -> None:
    """Run all seven policies per LoCoMo conversation and report them with CIs."""
    from earm_jax.jobs.locomo import LocomoJob, run_locomo_job

    console = Console(width=max(Console().width, 140))
    data = data or (
        Path(os.environ["EARM_LOCOMO_DATA"])
        if "EARM_LOCOMO_DATA" in os.environ
        else None
    )
    if data is None:
        raise typer.BadParameter(
            "give --data PATH (locomo10.json or a folder of conversations)"
        )
    settings = [part.strip() for part in memories.split(",") if part.strip()]
    for setting in settings:
        if setting not in ("turns", "observations"):
            raise typer.BadParameter(
                f"--memories must be turns or observations, got {setting!r}"
            )
    if scorer not in ("evidence", "vllm"):
        raise typer.BadParameter(f"--scorer must be evidence or vllm, got {scorer!r}")
    if scorer == "vllm" and (base_url is None or scorer_model is None):
        raise typer.BadParameter("--scorer vllm needs --base-url and --scorer-model")
    if answer and (answer_base_url is None or answer_model is None):
        raise typer.BadParameter("--answer needs --answer-base-url and --answer-model")
    job = LocomoJob(
        data=str(data),
        settings=tuple(settings),
        scorer=scorer,
        noises=tuple(_floats(noise, "--noise")),
        false_positive_rate=false_positive_rate,
        false_negative_rate=false_negative_rate,
        ks=tuple(_ints(top_k, "--top-k")),
        ranks=tuple(_ints(rank, "--rank")),
        seeds=tuple(_ints(seeds, "--seeds")),
        solver=solver,
        num_sweeps=num_sweeps,
        high_fraction=high_fraction,
        pool_size=pool_size,
        model=str(model) if model else None,
        cache_dir=str(cache_dir) if cache_dir else None,
        base_url=base_url,
        scorer_model=scorer_model,
        scorer_mode=scorer_mode,
        score_cache=str(score_cache) if score_cache else None,
        answer=answer,
        answer_base_url=answer_base_url,
        answer_model=answer_model,
        judge_base_url=judge_base_url,
        judge_model=judge_model,
        answer_limit=answer_limit,
        num_resamples=resamples,
    )
    try:
        job.validate()
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    grid = list(
        itertools.product(
            job.settings, job.noises if scorer == "evidence" else (None,), job.ranks
        )
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(
            "loading and embedding", total=len(grid) * len(job.seeds) + 1
        )

        def advance(description: str) -> None:
            progress.update(task, advance=1, description=description)

        payload, first_per_query = run_locomo_job(job, on_step=advance)
    metric_list = [f"recall@{k}" for k in job.ks] + [f"ndcg@{job.ks[0]}", "mrr"]
    for run in payload["runs"]:
        title = (
            f"LoCoMo {run['setting']}, rank {run['rank']}"
            + (f", evidence noise {run['noise']}" if run["noise"] is not None else "")
            + f" — {run['num_queries']} queries ({run['num_scored_queries']} labelled)"
        )
        console.print(
            output.results_table(run, metric_list, title + " (mean [95% CI])")
        )
        console.print(output.contrasts_table(run, metric_list, "paired contrasts"))
        if run["call_saving"] is not None:
            console.print(f"call saving of Mixed vs Full: {run['call_saving']:.1%}")
    console.print(payload["scorer_note"], markup=False)
    faults = payload["data_faults"]
    console.print(
        f"data faults repaired or dropped: {len(faults)} (listed in the JSON)"
    )
    if "answers" in payload:
        for row in payload["answers"]["by_policy"].items():
            console.print(f"answer accuracy {row[0]}: {row[1]}")
    if json_path is not None:
        write_json(json_path, payload)
        console.print(f"wrote {json_path}")
    if plot is not None:
        from earm_jax.jobs.locomo import plot_first_run

        plot_first_run(payload, first_per_query, plot)
        console.print(f"wrote {plot}")


def register(app: typer.Typer) -> None:
    app.command("locomo")(locomo)


__all__: list[Any] = ["register"]
