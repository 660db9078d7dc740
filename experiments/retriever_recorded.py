"""The agent-facing retriever fed with a real scorer's recorded answers: does
the product get what the harness measured?

For each conversation of a recorded-answers file it opens an
``OnlineRetriever`` in a fresh folder, adds the conversation's memories (all
at once, as ``earm locomo``'s default ``all_at_start``), and asks its
labelled questions in order with ``preset="best"`` at each call cap, once
down the similarity order and once down the free order of the fold that
never saw the conversation (``RetrieverConfig.free_order``). The scorer is
the recorded answers replayed through the fold's similarity blend
(``BlendedScorer(ReplayScorer.from_recorded(...))``): the answers the build
gives, no model loaded. Settings follow ``experiments/pool_order_compare.py``
(rank 2, the default ``best``: embedding call order, spend); the pool is the
retriever's own top 200 by cosine.

It keeps Recall@10 per question (evidence in the returned 10 / all the
question's evidence) and calls per question, and the paired difference free
− similarity with a bootstrap 95% CI resampling questions. ``--harness``
names the ``pool_order_compare.py`` JSON of the same answers, whose ``best``
at each cap is copied beside the retriever's (what ``earm locomo`` measured).

    python experiments/retriever_recorded.py --data ../shared/data/locomo \\
        --scores experiments/scores/turns-500steps-bf16-coverage-scores.npz \\
        --caps 0.10,0.25 --harness experiments/results/pool_order_turns.json \\
        --out experiments/results/retriever_recorded_turns.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("EARM_LOCOMO_DATA"))
    parser.add_argument("--scores", required=True)
    parser.add_argument("--caps", default="0.10,0.25")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--cache-dir", default=os.environ.get("EARM_CACHE_DIR"))
    parser.add_argument("--harness", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data (or $EARM_LOCOMO_DATA) is required")

    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.locomo import build_memories, load_locomo
    from earm_jax.retriever import OnlineRetriever, RetrieverConfig
    from earm_jax.scoring.recorded_answers import RecordedAnswers
    from earm_jax.scoring.replay import ReplayScorer
    from earm_jax.scoring.similarity_blend import BlendedScorer
    from earm_jax.store.embeddings import Embedder

    recorded = RecordedAnswers.load(args.scores)
    replay = ReplayScorer.from_recorded(recorded)
    embedder = Embedder(cache_dir=args.cache_dir)
    conversations = {
        c.sample_id: c
        for c in load_locomo(args.data)
        if c.sample_id in recorded.conversations
    }

    def ci(treatment: np.ndarray, baseline: np.ndarray) -> dict[str, float]:
        c = contrast_ci(treatment, baseline, num_resamples=args.resamples, seed=0)
        return {"estimate": c.estimate, "low": c.low, "high": c.high}

    harness: dict[float, Any] = {}
    if args.harness:
        measured = json.loads(Path(args.harness).read_text(encoding="utf-8"))
        harness = {row["cap"]: row["policies"]["best"] for row in measured["caps"]}

    rows: list[dict[str, Any]] = []
    for cap in [float(c) for c in args.caps.split(",") if c]:
        per_order: dict[str, dict[str, list[float]]] = {}
        for order in ("similarity", "free"):
            recall: list[float] = []
            calls: list[float] = []
            failures = 0
            started = time.perf_counter()
            for sample_id in sorted(conversations, key=int):
                memory_set = build_memories(conversations[sample_id], recorded.setting)
                asked = [
                    (q.question, set(relevant))
                    for q, relevant in zip(
                        memory_set.queries, memory_set.relevant_rows, strict=True
                    )
                    if relevant
                ]
                config = RetrieverConfig(
                    preset="best",
                    call_budget=cap,
                    rank=2,
                    pool_size=200,
                    top_k=10,
                    precompile=False,
                    free_order=recorded.free_order_of(sample_id)
                    if order == "free"
                    else None,
                )
                scorer = BlendedScorer(replay, recorded.blend_of(sample_id), embedder)
                with tempfile.TemporaryDirectory() as folder:
                    with OnlineRetriever(folder, scorer, embedder, config) as agent:
                        ids = agent.add([m.text for m in memory_set.memories])
                        row_of = {mid: row for row, mid in enumerate(ids)}
                        for question, relevant in asked:
                            answer = agent.query(question)
                            found = {row_of[m] for m in answer.memory_ids}
                            recall.append(len(found & relevant) / len(relevant))
                            calls.append(answer.calls + answer.cache_hits)
                            failures += len(answer.failures)
            per_order[order] = {"recall": recall, "calls": calls}
            print(
                f"cap {cap:.2f}, {order} order: Recall@10 {np.mean(recall):.3f}, "
                f"{np.mean(calls):.1f} calls a question, {failures} failed pairs, "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
        similarity, free = per_order["similarity"], per_order["free"]
        rows.append(
            {
                "cap": cap,
                "questions": len(similarity["recall"]),
                "best": {
                    "similarity_order": float(np.mean(similarity["recall"])),
                    "free_order": float(np.mean(free["recall"])),
                    "calls_per_query": {
                        "similarity_order": float(np.mean(similarity["calls"])),
                        "free_order": float(np.mean(free["calls"])),
                    },
                    "free_minus_similarity": ci(
                        np.asarray(free["recall"]), np.asarray(similarity["recall"])
                    ),
                },
                "harness_best": {
                    key: harness[cap][key] for key in ("similarity_order", "free_order")
                }
                if cap in harness
                else None,
            }
        )
    write_json(
        Path(args.out),
        {
            "setting": recorded.setting,
            "scores": Path(args.scores).name,
            "scorer": "recorded answers through the fold's similarity blend",
            "retriever": {"preset": "best", "rank": 2, "pool_size": 200, "k": 10},
            "caps": rows,
            **provenance(
                "python", ["experiments/retriever_recorded.py", *sys.argv[1:]]
            ),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
