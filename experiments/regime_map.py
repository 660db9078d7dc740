"""The regime map: where paying for a few scores and completing the rest
beats scoring the top of the similarity order, by scorer quality and call cap.

For each point on the measured quality axis (a build's recorded answers moved
toward the evidence label or toward similarity with ``--mix``, the model alone
or part-blended with similarity as ``blend:W``, or the evidence stand-in) and
each call cap, it runs ``earm locomo --preset best --side-information
--budget-scale auto`` (every anchored policy held at the cap) and keeps one
cell: each policy's Recall@10 and calls, the scorer's measured
quality (AUC, Full − Semantic, Full − Top-similarity), the winner among the
policies that pay at most the cap, and ``best``'s and ``best_side``'s margin
over Top-similarity with the paired 95% CI.

    python experiments/regime_map.py --scores experiments/scores/turns-scores.npz \
        --points model,oracle:0.2,oracle:0.4,similarity:0.5,noise:0.1 \
        --caps 0.10,0.15,0.25,0.35 --out experiments/results/regime_map/turns.json

With ``--simulate`` each point is ``recurrence:R`` (optionally ``+gap:G``) and
the run is ``earm simulate`` with the recorded answers' scorer profile (the
answers drawn from the real model's measured errors) on streams where a query
repeats an earlier need with probability R (and a relevant pair looks
unrelated with probability G, the simulator's ``--semantic-gap``, 0.3 unless
given): the control for how much of the map is LoCoMo's structure.

    python experiments/regime_map.py --simulate \
        --scores experiments/scores/turns-scores.npz \
        --points recurrence:0,recurrence:0.3,recurrence:0.6 --caps 0.25 \
        --out experiments/results/regime_map/turns_simulated.json

``--pool-order free`` re-sorts every pool by its fold's free order (cosine +
word coverage, fitted at build time; :mod:`earm_jax.locomo.pool_order`)
before any policy runs, so Semantic and Top-similarity go down that order.

A cell already in ``--out`` is kept (the run resumes); ``--redo`` reruns it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.eval.regime import map_cell, point_job_fields  # noqa: E402
from earm_jax.jobs.locomo import LocomoJob, run_locomo_job  # noqa: E402
from earm_jax.jobs.metadata import command_line, provenance, write_json  # noqa: E402
from earm_jax.scoring.recorded_answers import RecordedAnswers  # noqa: E402
from earm_jax.settings import EarmSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--scores", default="", help="a build's recorded answers")
    parser.add_argument("--memories", default="turns")
    parser.add_argument("--points", default="model,oracle:0.3,similarity:0.5")
    parser.add_argument("--caps", default="0.10,0.15,0.25,0.35")
    parser.add_argument("--conversations", default="")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--out", required=True)
    parser.add_argument("--redo", action="store_true")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument(
        "--pool-order",
        default="similarity",
        help="similarity, or free: every policy goes down each fold's free order",
    )
    args = parser.parse_args()
    if args.simulate and args.pool_order != "similarity":
        parser.error("--pool-order: simulated streams have no texts to re-sort by")
    conversations = tuple(c for c in args.conversations.split(",") if c)
    if args.scores and not conversations and not args.simulate:
        # Every conversation the recorded answers hold.
        conversations = tuple(RecordedAnswers.load(args.scores).conversations)
    out = Path(args.out)
    payload = json.loads(out.read_text()) if out.is_file() else {"cells": {}}
    payload.update(
        {
            "setting": args.memories,
            "scores": Path(args.scores).name if args.scores else None,
            "conversations": list(conversations),
            "limit": args.limit,
            "pool_order": args.pool_order,
        }
    )
    # Each invocation adds cells: the JSON keeps every command that made it.
    command = command_line("python experiments/regime_map.py")
    commands = [c for c in payload.get("commands", []) if c != command] + [command]
    for point in [p for p in args.points.split(",") if p]:
        for cap in [float(c) for c in args.caps.split(",") if c]:
            key = f"{cap:.2f}"
            if key in payload["cells"].get(point, {}) and not args.redo:
                continue
            started = time.perf_counter()
            if args.simulate:
                result = _simulated(point, cap, args.scores, args.resamples)
            else:
                result = _replayed(args, point, cap, conversations)
            cell = map_cell(result, cap)
            cell["seconds"] = round(time.perf_counter() - started, 1)
            payload["cells"].setdefault(point, {})[key] = cell
            payload.update(provenance())
            payload.update(commands=commands, command=" && ".join(commands))
            write_json(out, payload)
            _print(point, key, cell)


def _replayed(
    args: argparse.Namespace, point: str, cap: float, conversations: tuple
) -> dict:
    """``earm locomo --preset best --side-information --budget-scale auto`` at
    the point's scorer."""
    job = LocomoJob(
        data=args.data,
        settings=(args.memories,),
        ks=(10,),
        conversations=conversations,
        limit=args.limit,
        earm=EarmSettings(preset="best", call_budget=cap),
        auto_budget_scale=True,
        side_information=True,
        num_resamples=args.resamples,
        pool_order=args.pool_order,
        **point_job_fields(point, args.scores),
    )
    result, _ = run_locomo_job(job)
    return result


# A simulated point's knobs, as ``earm simulate`` options.
SIMULATED_KNOBS = {"recurrence": "--recurrence", "gap": "--semantic-gap"}


def _simulated(point: str, cap: float, scores: str, resamples: int) -> dict:
    """``earm simulate --preset best --side-information --call-order
    embedding`` (the simulator's streams carry texts only with side
    information, so its default order is similarity) with the recorded
    answers' profile at the point's recurrence."""
    import tempfile

    from earm_jax.cli import main as cli

    knobs = {}
    for part in point.split("+"):
        kind, _, value = part.partition(":")
        if kind not in SIMULATED_KNOBS or not value:
            raise ValueError(
                f"--simulate points are recurrence:R, optionally +gap:G, got {point!r}"
            )
        knobs[SIMULATED_KNOBS[kind]] = value
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "simulated.json"
        argv = [
            "simulate",
            "--preset",
            "best",
            "--side-information",
            "32",
            "--call-order",
            "embedding",
            "--scorer-profile",
            scores,
            *[part for knob in knobs.items() for part in knob],
            "--call-budget",
            str(cap),
            "--budget-scale",
            "auto",
            "--resamples",
            str(resamples),
            "--quiet",
            "--json",
            str(out),
        ]
        if cli.run(argv) != 0:
            raise RuntimeError(f"earm {' '.join(argv)} failed")
        return json.loads(out.read_text())


def _print(point: str, key: str, cell: dict) -> None:
    margin = cell["margins"]["best"]
    auc = cell["scorer"]["auc"]
    print(
        f"{point:16s} cap {key}  AUC {auc if auc is None else round(auc, 3)}  "
        f"Full-TopSim {cell['scorer']['full_minus_top_similarity']:+.3f}  "
        f"winner {cell['winner']:15s} best-TopSim {margin['mean']:+.3f} "
        f"[{margin['ci'][0]:+.3f}, {margin['ci'][1]:+.3f}]  "
        f"({cell['seconds']:.0f} s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
