"""Going down the free order against going down the similarity order, paired
by question: what re-sorting each pool by cosine + word coverage
(``earm locomo --pool-order free``) changes for each policy at equal calls.

For each call cap it runs ``earm locomo --scorer recorded --preset best
--side-information --budget-scale auto`` twice on the same recorded answers,
once per pool order (the same pools, the same calls per question), and keeps
per policy: Recall@10 and calls per question under each order, and the
paired difference (free − similarity) with a bootstrap 95% CI over questions.
It also pairs ``best`` down the free order against Top-similarity down the
similarity order: what a user who adopts both gets over scoring the top of
the similarity order.

``--noise X`` (and ``--graded G``) answers with the evidence stand-in instead
of the recorded answers, the pools still re-sorted by the file's free orders
(``--free-order-from``): a scorer whose answers hold no word-coverage term.

    python experiments/pool_order_compare.py --data ../shared/data/locomo \\
        --scores experiments/scores/turns-500steps-bf16-coverage-scores.npz \\
        --caps 0.10,0.25 --out experiments/results/pool_order_turns.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POLICIES = ("semantic", "top_similarity", "best", "learned_calls", "full")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("EARM_LOCOMO_DATA"))
    parser.add_argument("--scores", required=True)
    parser.add_argument("--caps", default="0.10,0.15,0.25,0.35")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--out", required=True)
    parser.add_argument("--noise", type=float, default=None)
    parser.add_argument("--graded", type=float, default=0.0)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data (or $EARM_LOCOMO_DATA) is required")

    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.locomo import LocomoJob, run_locomo_job
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.scoring.recorded_answers import RecordedAnswers
    from earm_jax.settings import EarmSettings

    recorded = RecordedAnswers.load(args.scores)

    def ci(treatment: np.ndarray, baseline: np.ndarray) -> dict[str, float]:
        c = contrast_ci(treatment, baseline, num_resamples=args.resamples, seed=0)
        return {"estimate": c.estimate, "low": c.low, "high": c.high}

    caps: list[dict[str, Any]] = []
    for cap in [float(c) for c in args.caps.split(",") if c]:
        per_order = {}
        for order in ("similarity", "free"):
            if args.noise is None:
                scorer: dict[str, Any] = {
                    "scorer": "recorded",
                    "scores": (args.scores,),
                }
            else:
                scorer = {
                    "scorer": "evidence",
                    "noises": (args.noise,),
                    "graded": args.graded,
                    "free_order_from": (args.scores,) if order == "free" else (),
                }
            job = LocomoJob(
                data=args.data,
                settings=(recorded.setting,),
                **scorer,
                ks=(10,),
                ranks=(2,),
                conversations=tuple(recorded.conversations),
                earm=EarmSettings(preset="best", call_budget=cap),
                auto_budget_scale=True,
                side_information=True,
                num_resamples=args.resamples,
                pool_order=order,
            )
            _, per_query = run_locomo_job(job)
            labelled = per_query.has_relevant
            per_order[order] = {
                policy: {
                    "recall": per_query.metrics[policy]["recall@10"][labelled],
                    "calls": per_query.metrics[policy]["calls"],
                }
                for policy in POLICIES
            }
        similarity, free = per_order["similarity"], per_order["free"]
        row: dict[str, Any] = {"cap": cap, "policies": {}}
        for policy in POLICIES:
            row["policies"][policy] = {
                "similarity_order": float(similarity[policy]["recall"].mean()),
                "free_order": float(free[policy]["recall"].mean()),
                "calls_per_query": {
                    "similarity_order": float(similarity[policy]["calls"].mean()),
                    "free_order": float(free[policy]["calls"].mean()),
                },
                "free_minus_similarity": ci(
                    free[policy]["recall"], similarity[policy]["recall"]
                ),
            }
        row["best_free_minus_top_similarity"] = ci(
            free["best"]["recall"], similarity["top_similarity"]["recall"]
        )
        row["best_free_minus_top_free"] = ci(
            free["best"]["recall"], free["top_similarity"]["recall"]
        )
        row["questions"] = int(similarity["semantic"]["recall"].size)
        caps.append(row)
        gain = row["best_free_minus_top_similarity"]
        print(
            f"cap {cap:.2f}: "
            + ", ".join(
                f"{p} {similarity[p]['recall'].mean():.3f} -> "
                f"{free[p]['recall'].mean():.3f}"
                for p in POLICIES
            )
            + f"; best (free) - Top-similarity {gain['estimate']:+.3f} "
            f"[{gain['low']:+.3f}, {gain['high']:+.3f}]"
        )
    write_json(
        Path(args.out),
        {
            "setting": recorded.setting,
            "scores": Path(args.scores).name,
            "scorer": "recorded"
            if args.noise is None
            else {"evidence_noise": args.noise, "graded": args.graded},
            "caps": caps,
            **provenance(
                "python", ["experiments/pool_order_compare.py", *sys.argv[1:]]
            ),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
