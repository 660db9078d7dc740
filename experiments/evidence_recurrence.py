"""How often a LoCoMo question's evidence was already evidence for an earlier
question, and where it sits in the similarity order: the property of the data
that decides how much amortizing past answers can find.

    python experiments/evidence_recurrence.py [--data ../shared/data/locomo]
        [--memories turns] [--out experiments/results/evidence_recurrence.json]

Per conversation: labelled questions; the share of their evidence memories
that were evidence for an earlier question (``recurring``); the share of
questions all of whose evidence recurs; and the similarity ranks of the
evidence in the 200-candidate pool (1-50, 51-100, 101-200, outside).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.metadata import provenance, write_json  # noqa: E402
from earm_jax.locomo.data import load_locomo  # noqa: E402
from earm_jax.locomo.streams import build_streams  # noqa: E402
from earm_jax.store.embeddings import Embedder  # noqa: E402

BANDS = ((0, 50), (50, 100), (100, 200))


def conversation_row(stream) -> dict:
    memory_set = stream.meta.memory_set
    arrays = stream.arrays
    seen: set[int] = set()
    evidence = recurring = all_recur = labelled = 0
    bands = np.zeros(len(BANDS) + 1, np.int64)
    for t, rows in enumerate(memory_set.relevant_rows):
        if not rows:
            continue
        labelled += 1
        again = [r in seen for r in rows]
        evidence += len(rows)
        recurring += sum(again)
        all_recur += all(again)
        positions = np.flatnonzero(arrays.valid[t])
        order = positions[np.argsort(-arrays.similarity[t, positions], kind="stable")]
        rank_of = {int(arrays.candidates[t, p]): i for i, p in enumerate(order)}
        for r in rows:
            rank = rank_of.get(r)
            placed = False
            for index, (low, high) in enumerate(BANDS):
                if rank is not None and low <= rank < high:
                    bands[index] += 1
                    placed = True
            bands[-1] += not placed
        seen.update(rows)
    return {
        "labelled_questions": labelled,
        "evidence": evidence,
        "recurring_share": recurring / max(evidence, 1),
        "questions_all_recurring_share": all_recur / max(labelled, 1),
        "similarity_rank_share": {
            **{
                f"{low + 1}-{high}": float(bands[i] / max(evidence, 1))
                for i, (low, high) in enumerate(BANDS)
            },
            "outside the pool": float(bands[-1] / max(evidence, 1)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--memories", default="turns")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    streams = build_streams(conversations, Embedder(), setting=args.memories)
    rows = {s.meta.sample_id: conversation_row(s) for s in streams}
    for sample, row in rows.items():
        bands = row["similarity_rank_share"]
        print(
            f"{sample}: {row['labelled_questions']} questions, evidence recurring "
            f"{row['recurring_share']:.2f}, all-recurring questions "
            f"{row['questions_all_recurring_share']:.2f}, ranks "
            + ", ".join(f"{k} {v:.2f}" for k, v in bands.items())
        )
    if args.out:
        write_json(
            args.out,
            {"memories": args.memories, "conversations": rows, **provenance()},
        )


if __name__ == "__main__":
    main()
