"""Does the scorer profile keep the room the real model leaves? Its draws on
LoCoMo's own pools, against the real answers.

The simulator's control for the regime map (``earm simulate --scorer-profile``)
draws a trained model's answers from its profile. This script checks the
profile where the answer is known: it keeps LoCoMo's pools (the same
candidates, the same evidence at the same similarity ranks) and replaces only
the answers:

- **real**: the build's recorded answers (as ``earm locomo --scorer recorded``
  replays them);
- **cell by cell**: answers drawn from the profile's cells alone (each pair's
  answer from its measured distribution, relevant or not at its
  similarity-rank bucket, with the memory's and the query's shared effects):
  what a v1 profile draws;
- **with standings**: the same draws with each relevant answer placed at a
  standing among its question's non-relevant answers drawn from the measured
  ones (a v2 profile, as ``earm simulate`` draws it now).

The profile is the one the recorded answers carry (``earm record-scores
--refit-profile`` brings an older file's up to v2). It is measured on these
same pools, so this is an in-sample check of what the profile's form keeps;
with
``--leave-one-out`` each conversation's answers are drawn from a profile fitted
on the other conversations' answers instead, the out-of-sample check.

For each: within-question AUC, Recall@10 of Full (the pool ranked by the
answers) and of Top-similarity (the ``--paid`` most similar share of each pool
paid and ranked by answer, the rest in similarity order), and their difference
(for the real answers with a paired bootstrap 95% CI over questions; for the
draws the mean and range over seeds), and the share of relevant memories above
95% and 99% of their question's non-relevant answers, per similarity-rank
bucket. Writes a JSON with the command, commit, date and machine.

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


def carried_profile(scores: str) -> Any:
    """The v2 profile the recorded answers carry."""
    from earm_jax.eval.scorer_profile import profile_from_json
    from earm_jax.scoring.recorded_answers import RecordedAnswers

    carried = RecordedAnswers.load(scores).profile
    profile = None if carried is None else profile_from_json(carried)
    if profile is None or profile.relevant_rank_quantiles is None:
        raise SystemExit(
            f"{scores} carries no v2 scorer profile: bring it up with `earm "
            "record-scores --refit-profile FILE --out FILE`"
        )
    return profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scores", required=True, help="a build's recorded answers")
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--paid", type=float, default=0.25)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument(
        "--leave-one-out",
        action="store_true",
        help="draw each conversation's answers from a profile fitted on the "
        "other conversations' answers (out of sample), not the carried one",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import jax

    from earm_jax.eval.scorer_profile import profile_answers, standings
    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.advise import recorded_labelled_answers
    from earm_jax.jobs.metadata import provenance, write_json

    pools = recorded_labelled_answers(args.scores, args.data, args.cache_dir)
    profile = carried_profile(args.scores)
    profile_source = "carried by the recorded answers"
    memories, num_memories = memory_index(pools)
    # Which profile draws which questions: one for all, or per conversation
    # one fitted on the others.
    parts = [(np.ones(pools.valid.shape[0], bool), profile)]
    if args.leave_one_out:
        from earm_jax.eval.scorer_profile import fit_scorer_profile

        profile_source = "fitted, for each conversation, on the other conversations"
        parts = []
        for group in np.unique(pools.groups):
            rows = pools.groups == group
            fitted, _ = fit_scorer_profile(
                pools.scores[~rows],
                pools.relevant[~rows],
                pools.valid[~rows],
                memories[~rows],
                np.flatnonzero(~rows),
            )
            parts.append((rows, fitted))
    variants = {
        "cell_by_cell": lambda fitted: fitted._replace(relevant_rank_quantiles=None),
        "with_standings": lambda fitted: fitted,
    }
    bucket = buckets(profile, pools.valid.shape[1])
    relevant = pools.relevant & pools.valid
    real = measure(pools.scores, pools, args.paid)
    ci = contrast_ci(real["full"], real["top_similarity"], seed=0)
    found = {"real": [standings(pools.scores, pools.relevant, pools.valid)]}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for name, variant in variants.items():
        found[name] = []
        for seed in range(args.seeds):
            drawn = np.full(pools.scores.shape, np.nan)
            for index, (chosen, fitted) in enumerate(parts):
                drawn[chosen] = np.asarray(
                    profile_answers(
                        jax.random.PRNGKey(seed)
                        if len(parts) == 1
                        else jax.random.fold_in(jax.random.PRNGKey(seed), index),
                        variant(fitted),
                        relevant[chosen],
                        memories[chosen],
                        num_memories,
                        pools.valid[chosen],
                    ),
                    np.float64,
                )
            drawn = np.where(pools.valid, drawn, np.nan)
            found[name].append(standings(drawn, pools.relevant, pools.valid))
            rows[name].append(summary(measure(drawn, pools, args.paid)))
            print(
                f"[profile-room] {name}, seed {seed}: Full - Top-similarity "
                f"{rows[name][-1]['full_minus_top_similarity']:+.3f}",
                file=sys.stderr,
            )
    edges = [int(e) for e in np.asarray(profile.rank_edges)]
    names = [f"{edges[b]}-{edges[b + 1]}" for b in range(len(edges) - 1)]
    layout = {
        names[b]: float(
            relevant[:, bucket == b].sum()
            / pools.num_relevant[pools.num_relevant > 0].sum()
        )
        for b in range(len(names))
    }

    def share_above(draws: list[np.ndarray], b: int, level: float) -> float:
        inside = relevant & (bucket[None, :] == b)
        values = np.concatenate([d[inside & np.isfinite(d)] for d in draws])
        return float(np.mean(values >= level))

    write_json(
        args.out,
        {
            "experiment": "profile_room",
            "scores": Path(args.scores).name,
            "profile": profile_source,
            "questions": int((pools.num_relevant > 0).sum()),
            "paid_share": args.paid,
            "relevant_by_rank_bucket": layout,
            "share_above": {
                source: {
                    names[b]: {
                        str(level): share_above(draws, b, level)
                        for level in (0.95, 0.99)
                    }
                    for b in range(len(names))
                }
                for source, draws in found.items()
            },
            "real": {
                **summary(real),
                "full_minus_top_similarity_ci95": [ci.low, ci.high],
            },
            **{name: over_seeds(found_rows) for name, found_rows in rows.items()},
            **provenance("python", ["experiments/profile_room.py", *sys.argv[1:]]),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
