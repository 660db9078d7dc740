"""Does the scorer profile keep the room the real model leaves? Its draws on
LoCoMo's own pools, against the real answers.

The simulator's control for the regime map (``earm simulate --scorer-profile``)
shows no room above Top-similarity with the trained model's profile, while the
real answers leave some on LoCoMo. Either the simulated streams lack LoCoMo's
structure, or the profile loses what makes the real Full better. This script
removes the first: it keeps LoCoMo's pools (the same candidates, the same
evidence at the same similarity ranks) and replaces only the answers:

- **real**: the build's recorded answers (as ``earm locomo --scorer recorded``
  replays them);
- **profile**: answers drawn from the profile the file carries, as ``earm
  simulate`` draws them (each pair's answer from its cell's measured
  distribution, relevant or not at its similarity-rank bucket, with the
  memory's and the query's shared effects), ``--seeds`` draws;
- **placed by rank**: the non-relevant answers drawn the same way, and each
  relevant memory's answer placed at a rank among its own question's
  non-relevant answers drawn from the ranks the real model gave relevant
  memories in that bucket (measured on these same pools: an in-sample upper
  bound on what a profile of that form keeps).

For each: within-question AUC, Recall@10 of Full (the pool ranked by the
answers) and of Top-similarity (the ``--paid`` most similar share of each pool
paid and ranked by answer, the rest in similarity order), and their difference
(for the real answers with a paired bootstrap 95% CI over questions; for the
draws the mean and range over seeds). Writes a JSON with the command, commit,
date and machine.

    python experiments/profile_room.py \\
        --scores experiments/scores/turns-500steps-scores.npz \\
        --out experiments/results/profile_room_turns.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

K = 10


def top_similarity_order(
    answers: np.ndarray, valid: np.ndarray, paid_share: float
) -> np.ndarray:
    """Scores that rank each pool as Top-similarity does: the most similar
    ``round(paid_share x valid)`` candidates by their answer, above the rest in
    similarity order (pools are in similarity order)."""
    positions = np.arange(answers.shape[1])[None, :]
    paid = positions < np.round(paid_share * valid.sum(axis=1, keepdims=True))
    return np.where(paid, 2.0 + np.nan_to_num(answers), -positions / answers.shape[1])


def measure(answers: np.ndarray, pools: Any, paid_share: float) -> dict[str, Any]:
    """Per question Recall@10 of Full, Top-similarity and Semantic, and the
    within-question AUC of ``answers``."""
    from earm_jax.eval.scorer_quality import recall_at, within_query_auc

    args = (pools.relevant, pools.valid, pools.num_relevant, K)
    labelled = pools.num_relevant > 0
    answers = np.where(pools.valid, answers, np.nan)
    return {
        "full": recall_at(answers, *args)[labelled],
        "top_similarity": recall_at(
            top_similarity_order(answers, pools.valid, paid_share), *args
        )[labelled],
        "semantic": recall_at(pools.similarity, *args)[labelled],
        "within_query_auc": within_query_auc(
            np.where(pools.valid, answers, -np.inf), pools.relevant, pools.valid
        ),
    }


def memory_index(pools: Any) -> tuple[np.ndarray, int]:
    """``int[T, N]`` one index per distinct (conversation, memory row)."""
    names = np.char.add(
        np.char.add(pools.groups[:, None].astype(str), ":"),
        pools.candidates.astype(str),
    )
    unique, inverse = np.unique(names, return_inverse=True)
    return inverse.reshape(names.shape).astype(np.int32), int(unique.size)


def buckets(profile: Any, width: int) -> np.ndarray:
    edges = np.asarray(profile.rank_edges)
    return np.clip(
        np.searchsorted(edges, np.arange(width), side="right") - 1, 0, edges.size - 2
    )


def ranks_among_negatives(answers: np.ndarray, pools: Any) -> np.ndarray:
    """``float[T, N]``: for each relevant candidate, the share of its
    question's non-relevant answers below its own (NaN elsewhere)."""
    out = np.full(answers.shape, np.nan)
    negatives = pools.valid & ~pools.relevant & np.isfinite(answers)
    for t in range(answers.shape[0]):
        below = np.sort(answers[t][negatives[t]])
        for p in np.flatnonzero(pools.relevant[t] & pools.valid[t]):
            out[t, p] = np.searchsorted(below, answers[t, p]) / max(below.size, 1)
    return out


def placed_by_rank(
    drawn: np.ndarray,
    pools: Any,
    rank_quantiles: np.ndarray,
    bucket: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """``drawn`` with each relevant answer replaced by one placed at a rank
    among its question's drawn non-relevant answers, the rank drawn from its
    bucket's measured quantiles (midway between the two neighbours it falls
    between; above the best, midway to 1)."""
    out = drawn.copy()
    levels = np.linspace(0.0, 1.0, rank_quantiles.shape[1])
    for t in range(drawn.shape[0]):
        below = np.sort(drawn[t][pools.valid[t] & ~pools.relevant[t]])
        for p in np.flatnonzero(pools.relevant[t] & pools.valid[t]):
            share = np.interp(rng.random(), levels, rank_quantiles[bucket[p]])
            k = int(np.floor(share * below.size))
            low = below[k - 1] if k >= 1 else 0.0
            high = below[k] if k < below.size else 1.0
            out[t, p] = 0.5 * (low + high)
    return out


def summary(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "full": float(values["full"].mean()),
        "top_similarity": float(values["top_similarity"].mean()),
        "semantic": float(values["semantic"].mean()),
        "full_minus_top_similarity": float(
            values["full"].mean() - values["top_similarity"].mean()
        ),
        "within_query_auc": values["within_query_auc"],
    }


def over_seeds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": rows}
    for name in rows[0]:
        values = np.array([row[name] for row in rows], np.float64)
        out[name] = float(values.mean())
        out[f"{name}_range"] = [float(values.min()), float(values.max())]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scores", required=True, help="a build's recorded answers")
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--paid", type=float, default=0.25)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import jax

    from earm_jax.eval.scorer_profile import profile_answers, profile_from_json
    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.advise import recorded_labelled_answers
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.scoring.recorded_answers import RecordedAnswers

    pools = recorded_labelled_answers(args.scores, args.data, args.cache_dir)
    carried = RecordedAnswers.load(args.scores).profile
    if carried is None:
        raise SystemExit(f"{args.scores} carries no scorer profile")
    profile = profile_from_json(carried)
    bucket = buckets(profile, pools.valid.shape[1])
    real = measure(pools.scores, pools, args.paid)
    ci = contrast_ci(real["full"], real["top_similarity"], seed=0)
    ranks = ranks_among_negatives(pools.scores, pools)
    levels = np.linspace(0.0, 1.0, 21)
    relevant = pools.relevant & pools.valid
    rank_quantiles = np.stack(
        [
            np.quantile(ranks[relevant & (bucket[None, :] == b)], levels)
            for b in range(int(bucket.max()) + 1)
        ]
    )
    memories, num_memories = memory_index(pools)
    drawn_rows, placed_rows, drawn_ranks = [], [], []
    for seed in range(args.seeds):
        drawn = np.asarray(
            profile_answers(
                jax.random.PRNGKey(seed),
                profile,
                pools.relevant & pools.valid,
                memories,
                num_memories,
            ),
            np.float64,
        )
        drawn = np.where(pools.valid, drawn, np.nan)
        drawn_ranks.append(ranks_among_negatives(drawn, pools))
        drawn_rows.append(summary(measure(drawn, pools, args.paid)))
        placed = placed_by_rank(
            drawn, pools, rank_quantiles, bucket, np.random.default_rng(seed)
        )
        placed_rows.append(summary(measure(placed, pools, args.paid)))
        print(
            f"[profile-room] seed {seed}: profile Full - Top-similarity "
            f"{drawn_rows[-1]['full_minus_top_similarity']:+.3f}, placed by rank "
            f"{placed_rows[-1]['full_minus_top_similarity']:+.3f}",
            file=sys.stderr,
        )
    edges = [int(e) for e in np.asarray(profile.rank_edges)]
    layout = {
        f"{edges[b]}-{edges[b + 1]}": float(
            relevant[:, bucket == b].sum()
            / pools.num_relevant[pools.num_relevant > 0].sum()
        )
        for b in range(len(edges) - 1)
    }
    write_json(
        args.out,
        {
            "experiment": "profile_room",
            "scores": Path(args.scores).name,
            "questions": int((pools.num_relevant > 0).sum()),
            "paid_share": args.paid,
            "relevant_by_rank_bucket": layout,
            "rank_among_negatives_quantiles": {
                f"{edges[b]}-{edges[b + 1]}": rank_quantiles[b].tolist()
                for b in range(len(edges) - 1)
            },
            "rank_among_negatives_quantiles_profile": {
                f"{edges[b]}-{edges[b + 1]}": np.quantile(
                    np.concatenate(
                        [r[relevant & (bucket[None, :] == b)] for r in drawn_ranks]
                    ),
                    levels,
                ).tolist()
                for b in range(len(edges) - 1)
            },
            "share_above": {
                source: {
                    f"{edges[b]}-{edges[b + 1]}": {
                        str(level): float(
                            np.mean(
                                np.concatenate(
                                    [
                                        r[relevant & (bucket[None, :] == b)]
                                        for r in found
                                    ]
                                )
                                >= level
                            )
                        )
                        for level in (0.95, 0.99)
                    }
                    for b in range(len(edges) - 1)
                }
                for source, found in (("real", [ranks]), ("profile", drawn_ranks))
            },
            "real": {
                **summary(real),
                "full_minus_top_similarity_ci95": [ci.low, ci.high],
            },
            "profile": over_seeds(drawn_rows),
            "placed_by_rank": over_seeds(placed_rows),
            **provenance("python", ["experiments/profile_room.py", *sys.argv[1:]]),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
