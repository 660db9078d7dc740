"""Scoring the top of a free order: what paying for the top of cosine + word
coverage (no call) would give, against the top of the similarity order, at
equal calls.

For each question and cap C, both rankings pay for the same number of
candidates, ``round(C x pool)`` (at least 1), and rank them by the scorer's
answers above the unpaid rest:

- **Top-similarity**: the paid ones are the most similar; the rest keep the
  similarity order;
- **Top-free**: the paid ones are the top of the free order (a logistic blend
  of the cosine and word coverage, each fold's fitted on its held-back
  questions; the file carries it, :mod:`earm_jax.locomo.pool_order`); the
  rest keep that order.

The scorer's answers are a build's recorded answers with the blend the file
carries. Per question Recall@10, the difference with a paired bootstrap 95%
CI. This is not a policy of the library (no ledger, no completion); it
measures how much of the room above Top-similarity a free order alone takes.

    python experiments/free_order_top.py --data ../shared/data/locomo \\
        --scores experiments/scores/turns-500steps-bf16-coverage-scores.npz \\
        --out experiments/results/free_order_top_turns.json
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

K = 10
CAPS = (0.10, 0.15, 0.25, 0.35)


def top_paid_recall(
    order: np.ndarray, answers: np.ndarray, stream: Any, cap: float
) -> np.ndarray:
    """Per labelled question, Recall@10 when the top ``round(cap x pool)`` (at
    least 1) of ``order`` are paid for and ranked by ``answers`` above the
    rest, the rest in ``order``."""
    from earm_jax.eval.regime import top_of_order
    from earm_jax.eval.scorer_quality import recall_at

    arrays = stream.arrays
    calls = np.maximum(np.rint(cap * arrays.valid.sum(axis=1)), 1)
    keys = top_of_order(answers, order, arrays.valid, calls)
    labelled = arrays.num_relevant > 0
    return recall_at(keys, arrays.relevant, arrays.valid, arrays.num_relevant, K)[
        labelled
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("EARM_LOCOMO_DATA"))
    parser.add_argument("--scores", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data (or $EARM_LOCOMO_DATA) is required")

    from earm_jax.eval.scorer_quality import recall_at
    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.locomo_recorded import replayed_streams
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.locomo.pool_order import free_order_key
    from earm_jax.scoring.recorded_answers import RecordedAnswers

    recorded = RecordedAnswers.load(args.scores)
    gathered: dict[str, list[np.ndarray]] = {}
    for stream, replay in replayed_streams(recorded, args.data, args.cache_dir):
        arrays = stream.arrays
        free = free_order_key(stream, recorded.free_order_of(stream.meta.sample_id))
        answers = np.nan_to_num(replay.arrays.scores.astype(np.float64), nan=0.0)
        labelled = arrays.num_relevant > 0
        args_ = (arrays.relevant, arrays.valid, arrays.num_relevant, K)
        parts = {
            "semantic": recall_at(arrays.similarity, *args_)[labelled],
            "free_order": recall_at(free, *args_)[labelled],
            "full": recall_at(np.where(arrays.valid, answers, -np.inf), *args_)[
                labelled
            ],
        }
        for cap in CAPS:
            parts[f"top_similarity:{cap}"] = top_paid_recall(
                arrays.similarity, answers, stream, cap
            )
            parts[f"top_free:{cap}"] = top_paid_recall(free, answers, stream, cap)
        for name, values in parts.items():
            gathered.setdefault(name, []).append(values)
    joined = {name: np.concatenate(values) for name, values in gathered.items()}
    caps = []
    for cap in CAPS:
        similarity, free = joined[f"top_similarity:{cap}"], joined[f"top_free:{cap}"]
        ci = contrast_ci(free, similarity, seed=0)
        caps.append(
            {
                "cap": cap,
                "top_similarity": float(similarity.mean()),
                "top_free": float(free.mean()),
                "free_minus_similarity": {
                    "estimate": ci.estimate,
                    "low": ci.low,
                    "high": ci.high,
                },
            }
        )
        print(
            f"cap {cap:.2f}: Top-similarity {similarity.mean():.3f}, "
            f"Top-free {free.mean():.3f}, {ci.estimate:+.3f} "
            f"[{ci.low:+.3f}, {ci.high:+.3f}]"
        )
    write_json(
        Path(args.out),
        {
            "setting": recorded.setting,
            "scores": Path(args.scores).name,
            "questions": int(joined["semantic"].size),
            "semantic": float(joined["semantic"].mean()),
            "free_order": float(joined["free_order"].mean()),
            "full": float(joined["full"].mean()),
            "caps": caps,
            **provenance("python", ["experiments/free_order_top.py", *sys.argv[1:]]),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
