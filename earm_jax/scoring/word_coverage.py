r"""How much of a question's rarer words a memory repeats.

LoCoMo's questions reuse the words of their evidence ("What did Caroline
research?" / "I researched adoption agencies"), and a sentence encoder's
cosine blurs exactly that: names, places and objects. The coverage of a
question :math:`q` by a memory :math:`m` is

.. math::

   \operatorname{cov}(q, m) = \frac{\sum_{w \in S(q) \cap S(m)} \mathrm{idf}(w)}
                                   {\sum_{w \in S(q)} \mathrm{idf}(w)} \in [0, 1],

with :math:`S(\cdot)` the set of a text's word stems (Snowball's English
stemmer, so "researched" meets "research") and :math:`\mathrm{idf}(w) =
\max(0, 8 - \mathrm{zipf}(w))` from ``wordfreq``'s English frequencies (a word
seen once per billion words weighs 8 less its Zipf value; "the" weighs 0.3,
"Caroline" 4). The weights come from a fixed table rather than from the
memory store, so the coverage is a function of the two texts alone: a scorer
gives a pair the same answer whichever other memories it is asked about, and a
store's first memories are weighed like its last.

The similarity blend (:mod:`earm_jax.scoring.similarity_blend`) takes it as a
third input beside the cross-encoder's answer and the cosine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

# The rarest word in wordfreq's English list has Zipf 1 (once per 100 million
# words); an unseen word, a name, gets Zipf 0 and so the full 8.
_ZIPF_CEILING = 8.0
_WORD = re.compile(r"[a-z0-9]+")


@functools.cache
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def _word_weight(word: str) -> float:
    import wordfreq

    return max(0.0, _ZIPF_CEILING - wordfreq.zipf_frequency(word, "en"))


@functools.lru_cache(maxsize=65536)
def weighted_stems(text: str) -> dict[str, float]:
    """``{stem: weight}`` of a text's words (lower-cased runs of letters and
    digits); a stem shared by several words keeps the largest weight."""
    words = _WORD.findall(text.lower())
    stems = _stemmer().stemWords(words)
    out: dict[str, float] = {}
    for word, stem in zip(words, stems, strict=True):
        out[stem] = max(out.get(stem, 0.0), _word_weight(word))
    return out


def word_coverage(query: str, memories: Sequence[str]) -> np.ndarray:
    """``float64[len(memories)]``: each memory's coverage of ``query`` (see the
    module docstring); 0 for every memory when the query has no weighted word.
    """
    wanted = weighted_stems(query)
    total = sum(wanted.values())
    if total <= 0.0:
        return np.zeros(len(memories), np.float64)
    out = np.empty(len(memories), np.float64)
    for i, memory in enumerate(memories):
        present = weighted_stems(memory)
        out[i] = sum(w for stem, w in wanted.items() if stem in present) / total
    return out


def pool_word_coverage(
    queries: Sequence[str],
    memories: Sequence[str],
    candidates: np.ndarray,
    valid: np.ndarray,
) -> np.ndarray:
    """``float64[T, N]``: the word coverage of question ``t`` by its pool's
    memory ``candidates[t, n]`` (rows of ``memories``), 0 at padding."""
    candidates = np.asarray(candidates)
    valid = np.asarray(valid, bool)
    out = np.zeros(candidates.shape, np.float64)
    for t, query in enumerate(queries):
        rows = candidates[t, valid[t]]
        out[t, valid[t]] = word_coverage(query, [memories[m] for m in rows])
    return out


__all__ = ["pool_word_coverage", "weighted_stems", "word_coverage"]
