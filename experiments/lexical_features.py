"""Which word-overlap feature to add to the similarity blend: eight lexical
features compared on a build's recorded answers, before one was built in.

Each feature is a function of a question and a pool memory:

- ``bm25``: Okapi BM25 (k1 1.2, b 0.75) of the question's words in the memory;
- ``coverage``: the share of the question's word weights the memory repeats
  (:mod:`earm_jax.scoring.word_coverage` is ``coverage-wordfreq-stemmed``);

with word weights either from the conversation (``conversation``: the inverse
document frequency over the memories inserted by the question's time, so
nothing later is read) or from ``wordfreq``'s English frequencies (8 minus the
Zipf value), on words or on their Snowball stems.

For each, a logistic blend of the model's recorded logit, the cosine and the
feature is fitted on the conversations of the *other* folds (no label of the
ranked conversation is used) and ranks every pool; per question Recall@10
against the blend of the logit and the cosine alone fitted the same way,
with a paired bootstrap 95% CI. These are the seven shared conversations the
results are reported on, so the choice made from this table is not
independent of them (docs/trained-scorer.md says so).

    python experiments/lexical_features.py --data ../shared/data/locomo \\
        --scores experiments/scores/turns-500steps-scores.npz \\
        --out experiments/results/lexical_features_turns.json
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

K = 10
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str, stem: bool) -> list[str]:
    import snowballstemmer

    found = _WORD.findall(text.lower())
    return snowballstemmer.stemmer("english").stemWords(found) if stem else found


def wordfreq_weight(word: str) -> float:
    import wordfreq

    return max(0.0, 8.0 - wordfreq.zipf_frequency(word, "en"))


def features(stream: Any) -> dict[str, np.ndarray]:
    """``float[T, N]`` per feature name, 0 at padding."""
    from earm_jax.scoring.word_coverage import pool_word_coverage

    meta, arrays = stream.meta, stream.arrays
    t_count, n_count = arrays.candidates.shape
    out: dict[str, np.ndarray] = {}
    for stem in (False, True):
        docs = [words(text, stem) for text in meta.memory_texts]
        counts = [Counter(d) for d in docs]
        mean_length = max(float(np.mean([len(d) for d in docs])), 1.0)
        names = {
            (kind, source): f"{kind}-{source}-{'stemmed' if stem else 'words'}"
            for kind in ("bm25", "coverage")
            for source in ("conversation", "wordfreq")
        }
        values = {name: np.zeros((t_count, n_count)) for name in names.values()}
        for t, query in enumerate(meta.query_texts):
            raw = _WORD.findall(query.lower())
            terms = words(query, stem)
            unique = list(dict.fromkeys(terms))
            inserted = np.flatnonzero(arrays.insert_time <= t)
            seen = max(len(inserted), 1)
            frequency = Counter(
                w for m in inserted for w in set(docs[m]) if w in set(unique)
            )
            weights = {
                "conversation": {
                    w: math.log(1 + (seen - frequency[w] + 0.5) / (frequency[w] + 0.5))
                    for w in unique
                },
                "wordfreq": {},
            }
            for word, term in zip(raw, terms, strict=True):
                weights["wordfreq"][term] = max(
                    weights["wordfreq"].get(term, 0.0), wordfreq_weight(word)
                )
            totals = {key: sum(w.values()) or 1.0 for key, w in weights.items()}
            for n in np.flatnonzero(arrays.valid[t]):
                memory = int(arrays.candidates[t, n])
                tf, length = counts[memory], len(docs[memory])
                for w in unique:
                    if w not in tf:
                        continue
                    saturation = (
                        tf[w]
                        * 2.2
                        / (tf[w] + 1.2 * (0.25 + 0.75 * length / mean_length))
                    )
                    for source, weight in weights.items():
                        values[names[("bm25", source)]][t, n] += weight[w] * saturation
                        values[names[("coverage", source)]][t, n] += (
                            weight[w] / totals[source]
                        )
        out.update(values)
    # The one built in must be the library's, not a near-copy of it.
    np.testing.assert_allclose(
        out["coverage-wordfreq-stemmed"],
        pool_word_coverage(
            meta.query_texts, meta.memory_texts, arrays.candidates, arrays.valid
        ),
        rtol=1e-9,
        atol=1e-12,
    )
    return out


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
    from earm_jax.scoring.platt import fit_logistic
    from earm_jax.scoring.recorded_answers import RecordedAnswers, answer_logits

    recorded = RecordedAnswers.load(args.scores)
    rows = []
    for stream, replay in replayed_streams(
        recorded, args.data, args.cache_dir, blend_weight=0.0
    ):
        arrays = stream.arrays
        rows.append(
            {
                "fold": recorded.conversations[stream.meta.sample_id].fold,
                "stream": stream,
                "logit": np.nan_to_num(
                    answer_logits(replay.arrays.scores.astype(np.float64)), nan=-30.0
                ),
                "cosine": np.where(arrays.valid, arrays.similarity, 0.0).astype(
                    np.float64
                ),
                **features(stream),
            }
        )
    names = [n for n in rows[0] if n.startswith(("bm25", "coverage"))]

    def recall(columns: list[str]) -> np.ndarray:
        out = []
        for row in rows:
            train = [other for other in rows if other["fold"] != row["fold"]]
            x = np.concatenate(
                [
                    np.stack([o[c] for c in columns], -1)[o["stream"].arrays.valid]
                    for o in train
                ]
            )
            y = np.concatenate(
                [o["stream"].arrays.relevant[o["stream"].arrays.valid] for o in train]
            )
            w = fit_logistic(x, y)
            arrays = row["stream"].arrays
            z = np.stack([row[c] for c in columns], -1) @ w[:-1]
            labelled = arrays.num_relevant > 0
            out.append(
                recall_at(
                    np.where(arrays.valid, z, -np.inf),
                    arrays.relevant,
                    arrays.valid,
                    arrays.num_relevant,
                    K,
                )[labelled]
            )
        return np.concatenate(out)

    semantic = np.concatenate(
        [
            recall_at(
                r["stream"].arrays.similarity,
                r["stream"].arrays.relevant,
                r["stream"].arrays.valid,
                r["stream"].arrays.num_relevant,
                K,
            )[r["stream"].arrays.num_relevant > 0]
            for r in rows
        ]
    )
    blend = recall(["logit", "cosine"])
    variants = []
    for name in names:
        with_feature = recall(["logit", "cosine", name])
        ci = contrast_ci(with_feature, blend, seed=0)
        variants.append(
            {
                "feature": name,
                "recall": float(with_feature.mean()),
                "minus_semantic": float(with_feature.mean() - semantic.mean()),
                "minus_blend": {
                    "estimate": ci.estimate,
                    "low": ci.low,
                    "high": ci.high,
                },
            }
        )
        print(f"{name:32s} {with_feature.mean():.3f}  {ci.estimate:+.3f}")
    write_json(
        Path(args.out),
        {
            "setting": recorded.setting,
            "scores": Path(args.scores).name,
            "questions": int(semantic.size),
            "semantic": float(semantic.mean()),
            "blend": float(blend.mean()),
            "variants": variants,
            **provenance("python", ["experiments/lexical_features.py", *sys.argv[1:]]),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
