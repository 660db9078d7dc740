"""Where a learned function of the embeddings points the calls: a float64
NumPy probe on a build's recorded answers, outside the policies.

Per question, at a cap of ``C`` calls: Top-similarity pays the ``C`` most
similar candidates and ranks them by the answer. The learned order pays the
``first`` most similar, then the ``C - first`` unpaid candidates a ridge
regression predicts highest, and ranks what it paid by the answer. The
regression (refitted after each question, causally: it sees only answers paid
before the choice) maps a candidate's features to its answer: the cosine, the
element-wise product of the question's and the memory's MiniLM embeddings
(scaled by sqrt(D)), and a bias; ``--within`` centres each question's paid
answers and features first (the question's level cancels, as in the
side-information model). Both rankings put unpaid candidates after the paid
ones in similarity order, so only which candidates were paid differs.

    python experiments/probe_learned_calls.py --scores FILE [--caps 0.10,0.25]
        [--first 0.4] [--ridge 1,10,100] [--within] [--out X.json]

Prints, per cap and ridge, Recall@10 of both and the paired 95% CI of the
difference over questions (bootstrap, conversations as blocks reported too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.eval.stats import contrast_ci  # noqa: E402
from earm_jax.jobs.metadata import command_line, write_json  # noqa: E402


def replayed_streams(scores_file: str, data: str, cache_dir: str | None):
    """The conversations' pools with the recorded answers as their scores."""
    from earm_jax.jobs.locomo_recorded import Mix, load_recorded, recorded_stream
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.scoring.replay import ReplayScorer
    from earm_jax.store.embeddings import Embedder

    recorded = load_recorded([scores_file])
    (setting, answers), *_ = recorded.items()
    conversations = select_conversations(
        load_locomo(data), tuple(answers.conversations), 0
    )
    embedder = Embedder(cache_dir=cache_dir)
    streams = build_streams(conversations, embedder, setting=setting, pool_size=200)
    replay = ReplayScorer.from_recorded(answers)
    return [
        recorded_stream(stream, answers, replay, 1.0, Mix())[0] for stream in streams
    ]


def features(arrays, t: int) -> np.ndarray:
    """float64[N, D + 2]: cosine, sqrt(D) q*m, 1."""
    memories = arrays.memory_embeddings[arrays.candidates[t]].astype(np.float64)
    query = arrays.query_embeddings[t].astype(np.float64)
    dim = query.shape[0]
    cosine = np.where(arrays.valid[t], arrays.similarity[t], 0.0)[:, None]
    return np.concatenate(
        [cosine, np.sqrt(dim) * memories * query, np.ones((len(cosine), 1))], axis=1
    )


def recall_at_10(order: np.ndarray, relevant: np.ndarray, denominator: int) -> float:
    return float(relevant[order[:10]].sum()) / denominator


def ranked(paid: np.ndarray, scores: np.ndarray, by_similarity: np.ndarray):
    """Paid candidates by their answer, then the unpaid in similarity order."""
    paid_order = paid[np.argsort(-scores[paid], kind="stable")]
    rest = by_similarity[~np.isin(by_similarity, paid)]
    return np.concatenate([paid_order, rest])


def centred(x: np.ndarray, y: np.ndarray, within: bool):
    return (x - x.mean(0), y - y.mean()) if within else (x, y)


def run_conversation(arrays, cap: int, first: int, ridges, within: bool):
    """Per labelled question: Recall@10 of Top-similarity and of the learned
    order at each ridge (each ridge with its own fit, on what it paid)."""
    num_queries = arrays.candidates.shape[0]
    dim = arrays.query_embeddings.shape[1] + 2
    grams = {ridge: np.zeros((dim, dim)) for ridge in ridges}
    moments = {ridge: np.zeros(dim) for ridge in ridges}
    top, learned = [], {ridge: [] for ridge in ridges}
    for t in range(num_queries):
        scores = arrays.scores[t].astype(np.float64)
        phi = features(arrays, t)
        by_similarity = np.flatnonzero(arrays.valid[t])  # descending similarity
        calls = min(cap, len(by_similarity))
        head = by_similarity[: min(first, calls)]
        rest = by_similarity[len(head) :]
        labelled = arrays.num_relevant[t] > 0
        denominator = max(int(arrays.num_relevant[t]), 1)
        if labelled:
            order = ranked(by_similarity[:calls], scores, by_similarity)
            top.append(recall_at_10(order, arrays.relevant[t], denominator))
        # The head's answers are paid before the learned choice, so they join
        # the fit first (causal within the question, as a round would).
        x_head, y_head = centred(phi[head], scores[head], within)
        for ridge in ridges:
            gram = grams[ridge] + x_head.T @ x_head
            moment = moments[ridge] + x_head.T @ y_head
            weights = np.linalg.solve(gram + ridge * np.eye(dim), moment)
            predicted = phi[rest] @ weights
            tail = rest[np.argsort(-predicted, kind="stable")][: calls - len(head)]
            paid = np.concatenate([head, tail])
            if labelled:
                order = ranked(paid, scores, by_similarity)
                learned[ridge].append(
                    recall_at_10(order, arrays.relevant[t], denominator)
                )
            # After the question, every answer it paid joins its fit.
            x, y = centred(phi[paid], scores[paid], within)
            grams[ridge] += x.T @ x
            moments[ridge] += x.T @ y
    return np.asarray(top), {r: np.asarray(v) for r, v in learned.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", required=True)
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--caps", default="0.10,0.15,0.25,0.35")
    parser.add_argument("--first", type=float, default=0.4)
    parser.add_argument("--ridge", default="1,10,100")
    parser.add_argument("--within", action="store_true")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    streams = replayed_streams(args.scores, args.data, None)
    ridges = [float(r) for r in args.ridge.split(",")]
    payload = {
        "command": command_line("python experiments/probe_learned_calls.py"),
        "conversations": [s.meta.sample_id for s in streams],
        "caps": {},
    }
    for cap_fraction in [float(c) for c in args.caps.split(",")]:
        cap = int(round(cap_fraction * 200))
        first = int(round(args.first * cap))
        tops, learned, groups = [], {r: [] for r in ridges}, []
        for stream in streams:
            top, by_ridge = run_conversation(
                stream.arrays, cap, first, ridges, args.within
            )
            tops.append(top)
            groups += [stream.meta.sample_id] * len(top)
            for ridge in ridges:
                learned[ridge].append(by_ridge[ridge])
        top = np.concatenate(tops)
        row = {"calls": cap, "first": first, "top_similarity": float(top.mean())}
        for ridge in ridges:
            values = np.concatenate(learned[ridge])
            interval = contrast_ci(values, top)
            low, high = interval.low, interval.high
            row[f"ridge={ridge:g}"] = {
                "recall@10": float(values.mean()),
                "minus_top_similarity": float((values - top).mean()),
                "ci": [float(low), float(high)],
            }
            print(
                f"cap {cap_fraction:.2f} ({cap} calls, first {first}) ridge {ridge:g}: "
                f"top-sim {top.mean():.3f} learned {values.mean():.3f} "
                f"({(values - top).mean():+.3f} [{low:+.3f}, {high:+.3f}])"
            )
        payload["caps"][f"{cap_fraction:.2f}"] = row
    if args.out:
        write_json(args.out, payload)
    else:
        print(json.dumps(payload["caps"], indent=1)[:2000])


if __name__ == "__main__":
    main()
