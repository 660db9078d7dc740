"""``earm locomo``: the seven policies on real LoCoMo conversations."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from earm_jax.cli import output
from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import (
    DEFAULTS,
    CacheDir,
    CallBudget,
    CallOrder,
    Conversations,
    EvaluationScorerBackend,
    Expand,
    ExpandMinScore,
    HighFraction,
    JsonPath,
    Limit,
    LocomoData,
    NumSweeps,
    Plot,
    PoolSize,
    Preset,
    Quiet,
    Resamples,
    ScorerDtype,
    ScorerMode,
    Solver,
    StopRule,
    comma_names,
)
from earm_jax.cli.options import (
    scorer_backend as resolve_scorer_backend,
)
from earm_jax.jobs.metadata import write_json

Number = TypeVar("Number", int, float)

DATA_ENV = "EARM_LOCOMO_DATA"
"""Where ``--data`` defaults to: locomo10.json or a folder of conversations."""


def _numbers(
    text: str, name: str, number: Callable[[str], Number], kind: str, example: str
) -> tuple[Number, ...]:
    """The comma list ``text`` of option ``name``, each part read by ``number``;
    a one-line error (naming ``kind``, showing ``example``) on a part it cannot
    read."""
    try:
        return tuple(number(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise UserError(
            f"{name} must be comma-separated {kind}, got {text!r}",
            f"e.g. {name} {example}",
        ) from error


def _floats(text: str, name: str) -> tuple[float, ...]:
    return _numbers(text, name, float, "numbers", "0.1,0.3")


def _ints(text: str, name: str) -> tuple[int, ...]:
    return _numbers(text, name, int, "integers", "2,8")


def resolve_data(data: Path | None) -> Path:
    """``--data``, else ``$EARM_LOCOMO_DATA``; a one-line error if neither names
    an existing path."""
    if data is None:
        configured = os.environ.get(DATA_ENV, "").strip()
        if not configured:
            raise UserError(
                "no LoCoMo data given",
                f"pass --data PATH (locomo10.json or a folder of conversations) "
                f"or set ${DATA_ENV}",
            )
        data, source = Path(configured).expanduser(), f"${DATA_ENV}"
    else:
        source = "--data"
    if not data.exists():
        raise UserError(
            f"{source} {str(data)!r} does not exist",
            "give the path of locomo10.json or of a folder of conversation files",
        )
    return data


def _build_backend(scorer_model: str | None) -> str | None:
    """The backend a trained-scorer build scored its held-out pools with (its
    answers are in the score cache under that identity), or ``None``."""
    from earm_jax.scoring.scorer_manifest import open_scorer_folder

    if scorer_model is None:
        return None
    try:
        return open_scorer_folder(scorer_model).scoring_backend
    except ValueError:  # not a scorer folder: the job says so, naming it
        return None


def _load_check(data: Path, conversations: tuple[str, ...], limit: int) -> None:
    """Reads the data once up front, so a file that is not LoCoMo, or a
    conversation that is not in it, is one line."""
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations

    fix = (
        "check the path: it must be LoCoMo's locomo10.json or a folder of its "
        "per-conversation files"
    )
    try:
        loaded = load_locomo(data)
    except (ValueError, OSError, UnicodeDecodeError) as error:
        message = " ".join(str(error).split())
        if str(data) not in message:
            message = f"{str(data)!r} is not LoCoMo: {message}"
        raise UserError(message, fix) from error
    if limit < 0:
        raise UserError(f"--limit must be >= 0, got {limit}", "0 means all questions")
    with user_errors("pick --conversations from the ids listed (comma list)"):
        select_conversations(loaded, conversations, limit)


def locomo(
    data: LocomoData = None,
    memories: Annotated[
        str, typer.Option(help="Memory settings: turns, observations (comma list).")
    ] = "turns",
    scorer: Annotated[
        str,
        typer.Option(
            help="evidence (stand-in), cross-encoder (a local model folder, e.g. "
            "from `earm train-scorer`), vllm (a server) or recorded (a build's "
            "recorded answers, --scores: no model runs)."
        ),
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
    solver: Solver = DEFAULTS.solver,
    num_sweeps: NumSweeps = DEFAULTS.num_sweeps,
    high_fraction: HighFraction = 0.1,
    pool_size: PoolSize = 200,
    model: Annotated[
        Path | None, typer.Option(help="sentence-transformers folder (default MiniLM).")
    ] = None,
    cache_dir: CacheDir = None,
    base_url: Annotated[
        str | None, typer.Option(help="vLLM server for --scorer vllm.")
    ] = None,
    scorer_model: Annotated[
        str | None,
        typer.Option(
            help="cross-encoder: a model folder, a trained-scorer build's "
            "folder, or one fold's folder (its training conversations refused); "
            "vllm: the served model name."
        ),
    ] = None,
    scorer_backend: EvaluationScorerBackend = None,
    scorer_dtype: ScorerDtype = None,
    allow_in_sample: Annotated[
        bool,
        typer.Option(
            help="cross-encoder: also score conversations the model was trained "
            "on (refused by default: their scores flatter it)."
        ),
    ] = False,
    force_weak_scorer: Annotated[
        bool,
        typer.Option(
            help="cross-encoder: use a trained scorer whose manifest measured "
            "Full Recall@10 at or below Semantic's (refused by default)."
        ),
    ] = False,
    scores: Annotated[
        str,
        typer.Option(
            help="recorded: the recorded-answers file(s) (`earm record-scores`), "
            "one per memory setting (comma list)."
        ),
    ] = "",
    blend_weight: Annotated[
        float,
        typer.Option(
            help="recorded: the similarity blend's weight (0: the model alone, "
            "1: the fitted blend the build's scorer uses)."
        ),
    ] = 1.0,
    mix: Annotated[
        str,
        typer.Option(
            help="recorded: move the scorer along the quality axis, TARGET:W with "
            "TARGET oracle (toward the evidence label) or similarity (toward "
            "the retriever's order), W in [0, 1]; its AUC is measured."
        ),
    ] = "",
    pool_order: Annotated[
        str,
        typer.Option(
            help="The order every policy goes down each pool: similarity (the "
            "retriever's) or free (cosine + word coverage, fitted per fold at "
            "build time; no call), read from --scores, or from "
            "--free-order-from with another scorer.",
        ),
    ] = "similarity",
    free_order_from: Annotated[
        str,
        typer.Option(
            help="--pool-order free with a scorer other than recorded: the "
            "recorded-answers file(s) whose folds' free orders re-sort the "
            "pools (one per memory setting, comma list)."
        ),
    ] = "",
    scorer_mode: ScorerMode = "yesno",
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
    resamples: Resamples = 1000,
    preset: Preset = "paper",
    call_budget: CallBudget = 0.25,
    call_order: CallOrder = DEFAULTS.call_order,
    stop_rule: StopRule = DEFAULTS.stop_rule,
    budget_scale: Annotated[
        str,
        typer.Option(
            help="The anchored policies' stage budgets times this (1: the "
            "paper's, about 26% of Full's calls), or auto: the scale at which "
            "they pay --call-budget of Full's calls on these conversations, so "
            "every policy is compared at equal calls."
        ),
    ] = "1",
    graded: Annotated[
        float,
        typer.Option(
            help="Evidence stand-in: a non-relevant candidate's expected score is "
            "G x (similarity percentile in its pool)^2 before noise (0: off)."
        ),
    ] = 0.0,
    expand: Expand = 0,
    expand_min_score: ExpandMinScore = 0.0,
    side_information: Annotated[
        bool,
        typer.Option(
            "--side-information",
            help="Also run mixed_side and best_side (the completion learned "
            "from the query's and memory's embeddings, fitted online, in place "
            "of the low-rank term) and learned_calls (Top-similarity's calls, "
            "the later ones where a function of the embeddings learned from "
            "the paid answers points) and mixed_fused (Mixed's calls, every "
            "candidate on the answer's scale: the unpaid by a regression of the "
            "answers on the texts, the cosine and the memory's bias).",
        ),
    ] = False,
    json_path: JsonPath = None,
    plot: Plot = None,
    conversations: Conversations = "",
    limit: Limit = 0,
    quiet: Quiet = False,
) -> None:
    """Run the paper's seven policies (--preset best adds best) per LoCoMo
    conversation and report them with CIs."""
    from earm_jax.eval.budget_match import AUTO
    from earm_jax.jobs.locomo import LocomoJob
    from earm_jax.jobs.progress import Progress
    from earm_jax.settings import EarmSettings

    console = output.console()
    data = resolve_data(data)
    settings = comma_names(memories)
    for setting in settings:
        if setting not in ("turns", "observations"):
            raise UserError(
                f"--memories must be turns or observations, got {setting!r}",
                "e.g. --memories turns,observations",
            )
    if scorer not in ("evidence", "vllm", "cross-encoder", "recorded"):
        raise UserError(
            f"--scorer must be evidence, cross-encoder, vllm or recorded, got "
            f"{scorer!r}",
            "use --scorer evidence (stand-in), cross-encoder (a local model "
            "folder), vllm (a server) or recorded (--scores FILE)",
        )
    if (scorer == "recorded") != bool(scores):
        raise UserError(
            "--scores goes with --scorer recorded, and --scorer recorded needs it",
            "pass --scorer recorded --scores FILE (a file `earm record-scores` wrote)",
        )
    if scorer == "cross-encoder" and scorer_model is None:
        raise UserError(
            "--scorer cross-encoder needs --scorer-model DIR",
            "pass a folder written by `earm train-scorer` (or any one-label "
            "cross-encoder folder)",
        )
    if scorer == "vllm" and (base_url is None or scorer_model is None):
        raise UserError(
            "--scorer vllm needs --base-url and --scorer-model",
            "start a server with `earm serve-scorer --model M` and pass the URL "
            "it prints and the served model name",
        )
    if answer and (answer_base_url is None or answer_model is None):
        raise UserError(
            "--answer needs --answer-base-url and --answer-model",
            "point them at an OpenAI-compatible chat server",
        )
    backend = resolve_scorer_backend(scorer_backend, scorer_dtype)
    if scorer == "cross-encoder" and scorer_backend is None and scorer_dtype is None:
        backend = _build_backend(scorer_model) or backend
    if backend != "torch-float32" and scorer != "cross-encoder":
        raise UserError(
            f"--scorer-backend {backend} goes with --scorer cross-encoder, not "
            f"--scorer {scorer}",
            "drop --scorer-backend, or score with --scorer cross-encoder",
        )
    _load_check(data, comma_names(conversations), limit)
    scale = _budget_scale(budget_scale)
    with user_errors("fix the option named above (see `earm locomo --help`)"):
        earm = EarmSettings(
            solver=solver,
            num_sweeps=num_sweeps,
            high_fraction=high_fraction,
            preset=preset,
            call_budget=call_budget,
            call_order=call_order,
            stop_rule=stop_rule,
            # auto: the job finds the scale on the conversations.
            budget_scale=1.0 if scale == AUTO else scale,
        )
    job = LocomoJob(
        data=str(data),
        settings=settings,
        scorer=scorer,
        noises=_floats(noise, "--noise"),
        false_positive_rate=false_positive_rate,
        false_negative_rate=false_negative_rate,
        ks=_ints(top_k, "--top-k"),
        ranks=_ints(rank, "--rank"),
        seeds=_ints(seeds, "--seeds"),
        earm=earm,
        pool_size=pool_size,
        model=str(model) if model else None,
        cache_dir=str(cache_dir) if cache_dir else None,
        base_url=base_url,
        scorer_model=scorer_model,
        scorer_mode=scorer_mode,
        scorer_backend=backend,
        allow_in_sample=allow_in_sample,
        force_weak_scorer=force_weak_scorer,
        score_cache=str(score_cache) if score_cache else None,
        answer=answer,
        answer_base_url=answer_base_url,
        answer_model=answer_model,
        judge_base_url=judge_base_url,
        judge_model=judge_model,
        answer_limit=answer_limit,
        num_resamples=resamples,
        conversations=comma_names(conversations),
        limit=limit,
        graded=graded,
        auto_budget_scale=scale == AUTO,
        scores=comma_names(scores),
        blend_weight=blend_weight,
        mix=mix,
        expand=expand,
        expand_min_score=expand_min_score,
        side_information=side_information,
        pool_order=pool_order,
        free_order_from=comma_names(free_order_from),
    )
    with user_errors("fix the option named above (see `earm locomo --help`)"):
        job.validate()
    payload, first_per_query = _run(job, Progress(enabled=not quiet))
    metric_list = output.shown_metrics(job.ks)
    stages = first_per_query.stage
    first_stage_only = bool(len(stages)) and int(stages.max()) == 0
    block = job.run_settings(job.ranks[0]).block_size
    questions = (
        f"with --limit {job.limit} every question"
        if job.limit
        else "every question (no conversation has more)"
    )
    for run in payload["runs"]:
        title = (
            f"LoCoMo {run['setting']}, rank {run['rank']}"
            + (f", evidence noise {run['noise']}" if run["noise"] is not None else "")
            + f" — {run['num_queries']} questions ({run['num_scored_queries']} "
            "labelled)"
        )
        notes = []
        if run["call_saving"] is not None:
            notes.append(f"call saving of Mixed vs Full: {run['call_saving']:.1%}")
        best = run["results"].get("best")
        if best is not None:
            full_calls = run["results"]["full"]["calls"]
            notes.append(
                f"best: {best['calls']} calls ({best['calls'] / full_calls:.1%} of "
                f"Full, cap {job.earm.call_budget:.0%}), rounds per query mean "
                f"{best['rounds']['mean']:.2f}, p95 {best['rounds']['p95']:.0f}"
            )
        tie = first_stage_only and output.tie_note(
            run,
            f"{questions} is among its conversation's first {block}, the "
            "schedule's first stage",
            f"raise --limit above {block} to see them part",
        )
        output.print_summary(console, run, metric_list, title, notes, tie or None)
        quality = run.get("scorer_quality")
        if quality is not None and quality.get("auc") is not None:
            k = job.ks[0]
            recall = quality[f"recall@{k}"]
            console.print(
                f"the scorer itself: AUC {quality['auc']:.3f} (similarity "
                f"{quality['auc_similarity']:.3f}), Full Recall@{k} "
                f"{recall['full']:.3f} vs Semantic {recall['semantic']:.3f} "
                f"(oracle {recall['oracle']:.3f}), calibration error "
                f"{quality['reliability']['ece']:.3f}",
                markup=False,
            )
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


def _budget_scale(text: str) -> float | str:
    """``--budget-scale``: a number >= 0 or ``auto``."""
    from earm_jax.eval.budget_match import AUTO

    if text.strip() == AUTO:
        return AUTO
    try:
        value = float(text)
    except ValueError as error:
        raise UserError(
            f"--budget-scale must be a number or auto, got {text!r}",
            "e.g. --budget-scale 0.57, or auto to match --call-budget",
        ) from error
    if value < 0:
        raise UserError(f"--budget-scale must be >= 0, got {text}", "e.g. 0.57")
    return value


def _run(job, progress):
    """Runs the job; scorer set-up errors and missing extras become one line."""
    from earm_jax.jobs.locomo import run_locomo_job

    kinds: tuple[type[BaseException], ...] = ()
    if job.scorer == "cross-encoder":
        from earm_jax.scoring.scorer_manifest import InSampleError, WeakScorerError

        with user_errors(
            "install the extra: pip install 'earm_jax[embed]'", ImportError
        ):
            with user_errors(
                "check --scorer-model: a folder written by `earm train-scorer` or a "
                "one-label cross-encoder folder"
            ):
                with (
                    user_errors(
                        "evaluate on conversations the scorer never saw, or pass "
                        "--allow-in-sample",
                        InSampleError,
                    ),
                    user_errors("", WeakScorerError),
                ):
                    return run_locomo_job(job, progress=progress)
    if job.scorer == "recorded":
        with user_errors(
            "check --scores: files `earm record-scores` wrote for these "
            "conversations and memory settings"
        ):
            return run_locomo_job(job, progress=progress)
    if job.scorer == "vllm":
        with user_errors(
            "install the client: pip install 'earm_jax[vllm]'", ImportError
        ):
            from earm_jax.scoring.vllm import ScorerConfigError
        kinds = (ScorerConfigError,)
    with user_errors(
        "install the extra: pip install 'earm_jax[embed]'", ModuleNotFoundError
    ):
        if not kinds:
            return run_locomo_job(job, progress=progress)
        with user_errors(
            "check --base-url and --scorer-model (is the server up? "
            "`earm serve-scorer --model M` prints both)",
            *kinds,
        ):
            return run_locomo_job(job, progress=progress)


def register(app: typer.Typer) -> None:
    app.command(
        "locomo", short_help="Run the paper's seven policies on LoCoMo conversations."
    )(locomo)


__all__: list[Any] = ["register"]
