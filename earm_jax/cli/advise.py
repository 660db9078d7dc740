"""``earm advise``: does completing the matrix pay for your scorer at your cap?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import CacheDir, LocomoData
from earm_jax.cli.output import console as make_console

VERDICTS = {
    "complete": "completing pays: with this much room above Top-similarity, a "
    "policy that uses what earlier queries paid for beat it in every cell of "
    "the map (`best`, the default, in most cells; learned calls in a few "
    "where the scorer is near-perfect)",
    "top_similarity": "score the top of the similarity order (Top-similarity): "
    "with this little room, no completing policy won anywhere in the map",
    "measure": "the room alone does not decide: in the map, scorers with this "
    "much room both paid and did not (the trained model without its similarity "
    "blend paid at 10-15% of the calls with less room than this, and lost at "
    "25-35%); replay your answers through the policies "
    "(`earm locomo --scorer recorded`, docs: When EARM pays)",
}

FREE_ORDER_ADVICE = {
    "go_down_it": "go down the build's free order (`earm locomo --pool-order "
    "free`; in the retriever `RetrieverConfig(free_order=free_order_from(BUILD))`"
    ", `earm mcp --free-order BUILD`): its top beats the top of the similarity "
    "order at this cap",
    "keep_similarity": "keep the similarity order: the top of the build's free "
    "order is behind it at this cap",
    "no_difference": "either order: the tops of the two are within the noise at "
    "this cap",
}


def advise_command(
    scores: Annotated[
        Path,
        typer.Option(
            help="Your scorer's labelled answers: a CSV with query_id, "
            "candidate_rank (1: the most similar), similarity, score (in [0, 1]), "
            "label (0/1) and an optional group, every pool candidate scored; or a "
            "recorded-answers .npz of `earm record-scores` (with --data)."
        ),
    ],
    call_budget: Annotated[
        float,
        typer.Option(help="The share of each pool a query may pay for, in (0, 1]."),
    ] = 0.25,
    data: LocomoData = None,
    cache_dir: CacheDir = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 1000,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the numbers as JSON.")
    ] = None,
) -> None:
    """Say whether `best` pays for your scorer at your call cap, from a small
    labelled sample: how far scoring every candidate (Full) beats scoring the
    cap's share at the top of the similarity order, against the regime map's
    bounds (below the smallest room where completion ever paid: score the top;
    above the largest where it never did: `best`; between: replay to know).
    With recorded answers whose build fitted a free order (cosine + word
    coverage), it also says whether paying for the top of that order beats
    the top of the similarity order at the same calls."""
    from earm_jax.jobs.advise import (
        MAP_BOUNDS,
        advise_answers,
        read_answers_csv,
        recorded_labelled_answers,
    )

    if not 0.0 < call_budget <= 1.0:
        raise UserError(
            f"--call-budget must be in (0, 1], got {call_budget}",
            "give the share of each pool a query may pay for, e.g. 0.25",
        )
    if not scores.is_file():
        raise UserError(f"--scores {str(scores)!r} does not exist", "give a file")
    if scores.suffix == ".npz":
        from earm_jax.cli.locomo import resolve_data

        with user_errors("give the LoCoMo data the answers were recorded on"):
            answers = recorded_labelled_answers(
                str(scores),
                str(resolve_data(data)),
                str(cache_dir) if cache_dir else None,
            )
    else:
        with user_errors("fix the CSV (columns: query_id, candidate_rank, ...)"):
            with open(scores, encoding="utf-8", newline="") as lines:
                answers = read_answers_csv(lines, str(scores))
    with user_errors("give labelled answers with a relevant candidate"):
        report = advise_answers(answers, call_budget, MAP_BOUNDS, resamples)
    console = make_console()
    room = report["full_minus_top_similarity"]
    recall = report["recall@10"]
    console.print(
        f"{report['questions']} questions with a relevant candidate; "
        f"{report['calls_per_query']:.1f} calls per question at {call_budget:.0%}",
        markup=False,
    )
    console.print(
        f"Recall@10: Full {recall['full']:.3f}, Top-similarity "
        f"{recall['top_similarity']:.3f}, Semantic {recall['semantic']:.3f}; "
        f"AUC {report['auc']:.3f} (similarity {report['auc_similarity']:.3f})",
        markup=False,
    )
    console.print(
        f"Full - Top-similarity {room['mean']:+.3f} [{room['ci'][0]:+.3f}, "
        f"{room['ci'][1]:+.3f}]; in the map, completion paid from "
        f"{MAP_BOUNDS[0]:+.3f} and failed up to {MAP_BOUNDS[1]:+.3f}",
        markup=False,
    )
    console.print(VERDICTS[report["verdict"]], markup=False)
    free = report.get("free_order")
    if free is not None:
        gain = free["top_of_free_order_minus_top_similarity"]
        left = free["full_minus_top_of_free_order"]
        console.print(
            f"the build's free order (cosine + word coverage, no call): its top "
            f"{free['recall@10']['top_of_free_order']:.3f}, "
            f"{gain['mean']:+.3f} [{gain['ci'][0]:+.3f}, {gain['ci'][1]:+.3f}] "
            f"over Top-similarity; Full {left['mean']:+.3f} "
            f"[{left['ci'][0]:+.3f}, {left['ci'][1]:+.3f}] above it",
            markup=False,
        )
        console.print(FREE_ORDER_ADVICE[free["advice"]], markup=False)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def register(app: typer.Typer) -> None:
    app.command(
        "advise", short_help="Whether `best` pays for your scorer at your call cap."
    )(advise_command)
