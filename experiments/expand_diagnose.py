"""Why search expansion fails on LoCoMo: who takes the top-10 expansion entries.

For the Mixed run of ``earm locomo --expand 10`` (turns, stand-in noise 0.1 by
default; evidence stand-in scorer, not an LLM), every expansion entry that
reaches the top 10 is classed by the memory's past direct scores (before the
query): its best past score, and whether it was ever scored relevant-like
(>= 0.5). Prints the shares and the completion / memory-bias levels.

    python experiments/expand_diagnose.py --setting turns --noise 0.1
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.contrib.expand import expanded_ranking, run_expanded
from earm_jax.core.online import online_solver
from earm_jax.eval.compare import usable_mask
from earm_jax.eval.metrics import ranking_positions
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import LocomoRunSettings, pad_and_stack
from earm_jax.store.embeddings import Embedder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--setting", default="turns")
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--slots", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    streams = build_streams(
        load_locomo(args.data),
        Embedder(),
        setting=args.setting,
        knobs=EvidenceNoise(args.noise),
    )
    batch, real = pad_and_stack([s.arrays for s in streams])
    run = LocomoRunSettings()
    _, num_queries, pool = batch.scores.shape
    config = run.solver_config(int(batch.insert_time.shape[1]), num_queries, pool)
    solver = online_solver(config, run.policy(pool))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(batch.scores.shape[0])
    )

    def one(key, stream):
        final, infos, expansion = run_expanded(solver, key, stream, args.slots)
        return final.memory_bias, infos.scores, infos.anchors, expansion

    bias, scores, anchors, expansion = jax.jit(jax.vmap(one))(keys, batch)
    usable = jax.vmap(usable_mask)(batch)
    ranked, eligible, _ = expanded_ranking(
        scores, usable, batch.queries.candidates, expansion
    )
    positions = np.asarray(ranking_positions(ranked, where=eligible))[..., pool:]
    entered = np.asarray(expansion.valid) & (positions < 10)
    memories = np.asarray(expansion.memories)
    candidates = np.asarray(batch.queries.candidates)
    anchors = np.asarray(anchors)
    answers = np.asarray(batch.scores)
    truth = np.asarray(batch.relevant_memories)
    best_past, relevant_past, is_relevant, completed = [], [], [], []
    for s in range(candidates.shape[0]):
        best = np.full(truth.shape[2], -np.inf)
        for t in range(num_queries):
            if not real[s, t]:
                break
            for m in memories[s, t][entered[s, t]]:
                best_past.append(best[m])
                relevant_past.append(best[m] >= 0.5)
                is_relevant.append(truth[s, t, m])
            completed.extend(np.asarray(expansion.completed[s, t])[entered[s, t]])
            scored = candidates[s, t][anchors[s, t]]
            np.maximum.at(best, scored, answers[s, t][anchors[s, t]])
    best_past = np.asarray(best_past)
    relevant_past = np.asarray(relevant_past)
    final_bias = np.asarray(bias)
    summary = {
        "setting": args.setting,
        "noise": args.noise,
        "queries": int(real.sum()),
        "entries_in_top10": int(entered.sum(-1)[real].sum()),
        "share_scored_relevant_before": float(relevant_past.mean()),
        "precision": float(np.mean(is_relevant)),
        "precision_if_scored_relevant_before": float(
            np.mean(np.asarray(is_relevant)[relevant_past])
        )
        if relevant_past.any()
        else None,
        "median_completion_of_entries": float(np.median(completed)),
        "median_best_past_score": float(np.median(best_past)),
        "final_memory_bias_quantiles": {
            q: float(np.quantile(final_bias[final_bias != 0], q))
            for q in (0.5, 0.9, 0.99)
        },
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
