"""One query answered: the round preset's anchors paid (one scorer request,
or one a round), the answers folded into the experience, the query written to
the journal, and the top ``k`` shown. The replay of an open folds a recorded
query in through the same steps. Part of
:class:`~earm_jax.retriever.online.OnlineRetriever`."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Observation, Query, SideInputs
from earm_jax.core.config import SolverState
from earm_jax.retriever.config import Retrieved, similarity_score
from earm_jax.retriever.experience import PayRound
from earm_jax.retriever.memory_rows import MemoryRows
from earm_jax.retriever.paying import failure_kind
from earm_jax.retriever.pool_order import shown_free_order


class QueryAnswering:
    """Pays, records and answers one query (the rows, the experience, the
    payer, the journal and the commit bookkeeping come from the retriever)."""

    config: Any
    rows: MemoryRows
    experience: Any
    payer: Any
    similarity_only: bool
    _journal: Any
    _redacted: Any
    _usage_totals: Any

    def _side(self, query: Query, vector) -> SideInputs | None:
        """The embeddings the calls that follow the texts read (else ``None``)."""
        if not self.config.reads_embeddings:
            return None
        embeddings = self.rows.embeddings
        rows = np.clip(np.asarray(query.candidates), 0, len(embeddings) - 1)
        return SideInputs(np.asarray(vector, np.float32), embeddings[rows])

    def _rounds(self, query: Query, pay: PayRound, vector=None, head_only=False):
        """The round preset's rounds for one query (:meth:`Experience.rounds`)."""
        return self.experience.rounds(query, pay, self._side(query, vector), head_only)

    def _apply_query(self, query: Query, observation: Observation, vector=None):
        """A recorded query folded in again (the replay of an open)."""
        experience = self.experience
        experience.ensure_room(experience.rows_applied, experience.count + 1)
        ledger = None
        if experience.ledger is not None and not self.similarity_only:
            # Replay the rounds with the recorded answers: the same requests,
            # hence the same carry, as when the query ran.
            values = np.asarray(observation.values)
            ok = np.asarray(observation.mask)
            ledger, _, _ = self._rounds(
                query, lambda positions: (values[positions], ok[positions]), vector
            )
        state, info = experience.observe(query, observation)
        experience.record(state, ledger)
        return info

    def _prepare(self, text: str, query: Query, index: int, state: SolverState):
        """Anchors of a one-round query (pool positions, rows) and their
        stored answers."""
        positions = np.flatnonzero(self.experience.select(query, index, state))
        rows = np.asarray(query.candidates)[positions]
        cached = self.payer.cached(text, [self.rows.texts[r] for r in rows])
        return positions, rows, cached

    def _pay(self, text, rows, cached, index, known=None):
        return self.payer.pay(
            text, [self.rows.texts[r] for r in rows], cached, index, known
        )

    def _finish(
        self,
        text,
        query,
        positions,
        rows,
        answers,
        k,
        calls,
        hits,
        adaptive=None,
        vector=None,
    ):
        """Records the query, updates the state, and builds the answer."""
        size = self.config.pool_size
        table = self.rows
        values = np.zeros(size, np.float32)
        mask = np.zeros(size, bool)
        failures = []
        for position, row, answer in zip(positions, rows, answers, strict=True):
            if answer.ok:
                values[position], mask[position] = answer.value, True
            else:
                failures.append((table.ids[row], answer.reason))
                self.payer.count_failure(answer.reason)
        observation = Observation(jnp.asarray(values), jnp.asarray(mask))
        experience = self.experience
        index = experience.count
        state, info = experience.observe(query, observation)
        # The best preset ranks by its own merge of direct answers and
        # similarity (policies/adaptive.py); the paper's by the mixed scores.
        scores = np.asarray(info.scores if adaptive is None else adaptive[1].scores)
        # What a caller is shown is on one scale whatever ranked it: the direct
        # answer where paid, the completion's estimate elsewhere, in [0, 1]
        # (best's merge keys order candidates but are not scores).
        # Clipped: a completion at the floor sits one ulp below 0 (so that a
        # direct 0 outranks it), which is no score to show.
        shown = np.clip(np.asarray(info.scores), 0.0, 1.0)
        budget = int(info.budget if adaptive is None else adaptive[1].limit)
        if self.similarity_only:
            # With no answer anywhere the completion knows nothing: similarity
            # is the only evidence, so it both ranks and is shown.
            scores = np.asarray(query.similarity, np.float32)
            shown = (
                similarity_score(query.similarity)
                if self.config.free_order is None
                else shown_free_order(query.similarity)
            )
            budget = 0
        valid = np.asarray(query.valid)
        candidates = np.asarray(query.candidates)
        positions_ranked = [
            p for p in np.lexsort((np.arange(size), -scores)) if valid[p]
        ][:k]
        chosen = sorted(
            positions_ranked, key=lambda p: (table.origin[candidates[p]], p)
        )
        payload = {
            "index": index,
            "k": k,
            "calls": calls,
            "cache_hits": hits,
            "budget": budget,
            # The kind only: a scorer's own words may quote the pair's texts.
            "failures": [
                [int(rows[i]), failure_kind(a.reason)]
                for i, a in enumerate(answers)
                if not a.ok
            ],
            "answer": [int(candidates[p]) for p in positions_ranked],
        }
        keep_text = self.config.query_retention == "keep"
        if keep_text:
            payload["text"] = text
        with self._journal.transaction() as db:
            seq = self._journal.append_op(
                db, "query", payload, self._encode_query(query, observation, vector)
            )
            if keep_text and self._redacted.get("texts"):
                self._redacted = {**self._redacted, "texts": False}
                self._journal.set_meta(db, "redacted", self._redacted)
        experience.record(state, None if adaptive is None else adaptive[0])
        if self._usage_totals is not None:
            self._usage_totals[0] += calls
            self._usage_totals[1] += hits
            self._usage_totals[2] += int(valid.sum())
        self._committed(seq, query=True)
        self._warm_ahead()
        return Retrieved(
            memory_ids=[table.ids[candidates[p]] for p in chosen],
            texts=[table.texts[candidates[p]] for p in chosen],
            metadata=[dict(table.metadata[candidates[p]]) for p in chosen],
            scores=[float(shown[p]) for p in chosen],
            anchored=[bool(mask[p]) for p in chosen],
            calls=calls,
            cache_hits=hits,
            failures=failures,
            budget=budget,
            query_index=index,
            ranked_ids=[table.ids[candidates[p]] for p in positions_ranked],
            rounds=1 if adaptive is None else adaptive[2],
        )

    def _answer(
        self,
        text: str,
        query: Query,
        k: int,
        known=None,
        prepaid: int = 0,
        vector=None,
    ) -> Retrieved:
        """Pays what the anchors need and records the query.

        ``known``: answers this query holds already, by memory text (the
        asynchronous path pays before it takes its turn); ``prepaid``: the
        pairs it paid for them, reported as this query's calls; ``vector``:
        the query's embedding (the learned-calls preset reads and records it).
        """
        experience = self.experience
        index = experience.count
        experience.ensure_room(experience.rows_applied, index + 1)
        if self.similarity_only:
            return self._finish(text, query, [], [], [], k, 0, 0, vector=vector)
        if experience.ledger is not None:
            return self._answer_in_rounds(text, query, k, known, prepaid, vector)
        positions, rows, cached = self._prepare(text, query, index, experience.state)
        answers, calls, hits = self._pay(text, rows, cached, index, known)
        return self._finish(
            text, query, positions, rows, answers, k, calls + prepaid, hits
        )

    def _answer_in_rounds(
        self,
        text: str,
        query: Query,
        k: int,
        known=None,
        prepaid: int = 0,
        vector=None,
    ) -> Retrieved:
        """A query of a preset that pays in rounds (``best``, learned calls):
        one batched scorer request per round."""
        index = self.experience.count
        all_positions, all_rows, all_answers = [], [], []
        totals = {"calls": prepaid, "hits": 0}

        def pay(positions: np.ndarray):
            rows = np.asarray(query.candidates)[positions]
            cached = self.payer.cached(text, [self.rows.texts[r] for r in rows])
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


__all__ = ["QueryAnswering"]
