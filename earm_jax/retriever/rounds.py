"""The query of a preset that pays in rounds (``best``: rounds of growing
size; ``learned_calls``: the most similar, then where the learned regression
points), one batched scorer request each, run live or replayed from the
recorded answers."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Observation, Query, SideInputs
from earm_jax.core.online import usable_candidates
from earm_jax.policies.adaptive import Ledger
from earm_jax.policies.adaptive.state import RoundState
from earm_jax.policies.adaptive.stop_rules import in_similarity_head
from earm_jax.retriever.compiled import adaptive_for, round_context
from earm_jax.retriever.config import Retrieved


def _in_head(policy, progress) -> bool:
    """Whether the query's next round still pays down the similarity order."""
    if isinstance(progress, RoundState):
        return bool(in_similarity_head(policy.config, progress))
    return int(progress.rounds) < 1  # learned calls: the head is the first round


class AdaptiveRounds:
    """The ``best`` preset's half of :class:`OnlineRetriever`."""

    def _rounds(
        self, query: Query, pay, vector=None, head_only: bool = False
    ) -> tuple[Ledger, Any, int]:
        """The round preset's rounds for one query.

        ``pay(positions) -> (values, ok)`` answers one round (one batched scorer
        request live; the recorded answers on replay); ``vector`` is the query's
        embedding (the calls that follow the texts read it); ``head_only``
        stops where the similarity head ends (a query planned ahead of its
        turn: what follows reads a regression the queries before it still
        change). Returns the policy's new carry (the call ledger, the
        regression), its decision and the number of rounds.
        """
        policy, begin, select_round, observe_round, finish = adaptive_for(
            self.config, self._policy_width()
        )
        side = None
        if self.config.reads_embeddings:
            rows = np.clip(np.asarray(query.candidates), 0, len(self._embeddings) - 1)
            side = SideInputs(np.asarray(vector, np.float32), self._embeddings[rows])
        ledger = self.ledger
        # The learned order of the unscored reads the memories' biases in the
        # experience matrix as fitted on the queries before this one.
        memory_bias = self.state.memory_bias[query.candidates]
        progress = begin(
            None,
            ledger,
            query,
            round_context(
                usable_candidates(self.state, query),
                self.state.count,
                self.config.pool_size,
                memory_bias,
                side,
            ),
        )
        size = self.config.pool_size
        rounds = 0
        for _ in range(policy.num_rounds):
            if head_only and not _in_head(policy, progress):
                break
            requested = np.asarray(select_round(ledger, progress))
            if not requested.any():
                break
            positions = np.flatnonzero(requested)
            answered, ok = pay(positions)
            values = np.zeros(size, np.float32)
            mask = np.zeros(size, bool)
            values[positions] = np.where(ok, answered, 0.0)
            mask[positions] = ok
            progress = observe_round(
                ledger,
                progress,
                jnp.asarray(requested),
                Observation(jnp.asarray(values), jnp.asarray(mask)),
            )
            rounds += 1
        ledger, info = finish(ledger, progress)
        return ledger, info, rounds

    def _answer_adaptive(
        self,
        text: str,
        query: Query,
        k: int,
        known=None,
        prepaid: int = 0,
        vector=None,
    ) -> Retrieved:
        index = self._count
        all_positions, all_rows, all_answers = [], [], []
        totals = {"calls": prepaid, "hits": 0}

        def pay(positions: np.ndarray):
            rows = np.asarray(query.candidates)[positions]
            cached = self._journal.get_scores(
                self._scorer_key, text, [self._texts[r] for r in rows]
            )
            answers, calls, hits = self._pay(text, rows, cached, index, known)
            totals["calls"] += calls
            totals["hits"] += hits
            all_positions.extend(int(p) for p in positions)
            all_rows.extend(int(r) for r in rows)
            all_answers.extend(answers)
            return (
                np.asarray([a.value if a.ok else 0.0 for a in answers], np.float32),
                np.asarray([a.ok for a in answers], bool),
            )

        ledger, info, rounds = self._rounds(query, pay, vector)
        return self._finish(
            text,
            query,
            np.asarray(all_positions, np.int64),
            np.asarray(all_rows, np.int64),
            all_answers,
            k,
            totals["calls"],
            totals["hits"],
            adaptive=(ledger, info, rounds),
            vector=vector,
        )
