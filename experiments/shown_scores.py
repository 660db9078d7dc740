"""How well ``Retrieved.scores`` tells a caller the scorer's answer where the
retriever did not pay for it.

LoCoMo conversations are replayed through ``OnlineRetriever`` (every turn
added, then every question asked in order) with a build's recorded answers
as the scorer (:meth:`~earm_jax.scoring.replay.ReplayScorer.from_recorded`:
the model's own answer, no similarity blend). For each of the ``k`` memories
a query returns unpaid, the shown score is compared with the answer the
scorer would have given (the recorded answer of that pair): mean absolute
error, mean shown against mean answer, and Spearman's rank correlation over
all such pairs; paid memories show their answer by construction and are
only counted.

Unpaid memories are returned only when ``k`` exceeds what a query paid
(with ``best`` at 25% and ``k = 10`` every returned memory is paid), hence:

    python experiments/shown_scores.py --scores \\
        experiments/scores/turns-500steps-scores.npz --conversations 26,30,41 \\
        --k 30 --call-budget 0.10 [--out X.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.metadata import provenance, write_json  # noqa: E402


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def replay(memory_set, scorer, answers, embedder, preset, call_budget, k):
    """``(shown, truth, paid)`` over every returned memory of every question."""
    from earm_jax.retriever import OnlineRetriever, RetrieverConfig
    from earm_jax.scoring.cache import text_sha256

    shown, truth, paid = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        retriever = OnlineRetriever(
            folder,
            scorer,
            embedder,
            RetrieverConfig(preset=preset, call_budget=call_budget),
        )
        ids = retriever.add([memory.text for memory in memory_set.memories])
        text_of = {
            memory_id: m.text
            for memory_id, m in zip(ids, memory_set.memories, strict=True)
        }
        for question in memory_set.queries:
            answer = retriever.query(question.question, k=k)
            query_digest = text_sha256(question.question)
            for memory_id, score, anchored in zip(
                answer.memory_ids, answer.scores, answer.anchored, strict=True
            ):
                value = answers.get((query_digest, text_sha256(text_of[memory_id])))
                if value is None:
                    continue  # a pair the build did not score: no truth to compare
                shown.append(score)
                truth.append(value)
                paid.append(anchored)
        retriever.close()
    return np.asarray(shown), np.asarray(truth), np.asarray(paid, bool)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--scores", required=True, help="a recorded-answers file")
    parser.add_argument("--conversations", default="26,30,41")
    parser.add_argument("--preset", default="best")
    parser.add_argument("--call-budget", type=float, default=0.10)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    from earm_jax.locomo import load_locomo
    from earm_jax.locomo.memories import build_memories
    from earm_jax.scoring.recorded_answers import RecordedAnswers
    from earm_jax.scoring.replay import ReplayScorer
    from earm_jax.store.embeddings import Embedder

    recorded = RecordedAnswers.load(args.scores)
    scorer = ReplayScorer.from_recorded(recorded)
    answers = {
        pair: 1.0 / (1.0 + np.exp(-logit)) for pair, logit in recorded.pairs().items()
    }
    conversations = {c.sample_id: c for c in load_locomo(args.data)}
    embedder = Embedder()
    rows = []
    for sample in args.conversations.split(","):
        memory_set = build_memories(conversations[sample], recorded.setting)
        rows.append(
            replay(
                memory_set,
                scorer,
                answers,
                embedder,
                args.preset,
                args.call_budget,
                args.k,
            )
        )
    shown, truth, paid = (np.concatenate(parts) for parts in zip(*rows, strict=True))
    unpaid = ~paid
    if not unpaid.any():
        raise SystemExit(
            f"every one of the {len(shown)} memories returned was paid: ask for "
            "more than a query pays (a larger --k or a smaller --call-budget)"
        )
    report = {
        "preset": args.preset,
        "call_budget": args.call_budget,
        "conversations": args.conversations.split(","),
        "returned_with_a_recorded_answer": int(len(shown)),
        "paid": int(paid.sum()),
        "unpaid": {
            "count": int(unpaid.sum()),
            "mean_abs_error": float(np.mean(np.abs(shown - truth)[unpaid])),
            "mean_shown": float(np.mean(shown[unpaid])),
            "mean_answer": float(np.mean(truth[unpaid])),
            "spearman": _spearman(shown[unpaid], truth[unpaid]),
        },
    }
    for key, value in report["unpaid"].items():
        print(f"unpaid {key}: {value:.4f}" if isinstance(value, float) else value)
    print(f"paid {report['paid']}, unpaid {report['unpaid']['count']}")
    if args.out:
        write_json(
            args.out,
            {**report, **provenance("python experiments/shown_scores.py", argv)},
        )


if __name__ == "__main__":
    main()
