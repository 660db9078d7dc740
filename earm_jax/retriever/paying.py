"""Paying the scorer: one request in a daemon thread (so a hang never blocks
the caller), every answer validated, every fault turned into a per-pair
failure that is counted and never observed as a score."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from earm_jax.base import Query
from earm_jax.core.config import SolverState
from earm_jax.retriever.config import Usage
from earm_jax.retriever.serial import serialized
from earm_jax.scoring.base import PairScore, Scorer


class Pending:
    """One scorer request running in a daemon thread (so a hang never blocks)."""

    def __init__(self, scorer: Scorer, requests: list) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(scorer, requests), daemon=True
        )
        thread.start()

    def _run(self, scorer: Scorer, requests: list) -> None:
        try:
            self.result = scorer.score_many(requests)
        except BaseException as error:  # noqa: BLE001 - reported per pair
            self.error = error
        finally:
            self.done.set()


def validated(answer: Any) -> PairScore:
    if not isinstance(answer, PairScore):
        return PairScore.failure(
            f"scorer returned {type(answer).__name__}, not a PairScore"
        )
    if not answer.ok:
        return PairScore.failure(answer.reason or "failed")
    value = answer.value
    if not isinstance(value, int | float | np.floating) or isinstance(value, bool):
        return PairScore.failure(f"score is not a number: {value!r}")
    if not math.isfinite(value):
        return PairScore.failure(f"score is not finite: {value!r}")
    if not 0.0 <= value <= 1.0:
        return PairScore.failure(f"score out of range [0, 1]: {value!r}")
    return PairScore.success(float(value))


# The leading words of the reasons this package's scorers and checks give:
# a reason is stored (and counted) by one of these, never by its own words,
# which may quote the query or the memory.
FAILURE_KINDS = (
    "timeout",
    "scorer raised",
    "scorer returned",
    "wrong length",
    "score is not a number",
    "score is not finite",
    "score out of range",
    "invalid score",
    "not scored",
    "not recorded",
    "bad response",
    "parse",
    "model",
    "http",
    "evidence",
)


def failure_kind(reason: str) -> str:
    """What kind of failure ``reason`` names, in words that cannot hold the
    pair's texts: one of :data:`FAILURE_KINDS` (``"scorer raised"`` with the
    exception's class name), else ``"other"``.

    >>> failure_kind("scorer raised RuntimeError: cannot score 'Sam's PIN'")
    'scorer raised RuntimeError'
    >>> failure_kind("timeout after 120 s"), failure_kind("Sam's PIN is 4417")
    ('timeout', 'other')
    """
    head = reason.split(":")[0].strip()
    words = head.split()
    if head.startswith("scorer raised ") and len(words) == 3:
        name = words[2]
        return f"scorer raised {name}" if name.isidentifier() else "scorer raised"
    for kind in FAILURE_KINDS:
        if head.lower() == kind or head.lower().startswith(kind + " "):
            # Only the kind's own words: what follows may quote a text.
            return kind
    return "other"


def checked_answers(
    requests: Sequence[tuple[str, Sequence[str]]],
    answers: Any,
    error: BaseException | None = None,
) -> list[list[PairScore]]:
    """One validated :class:`PairScore` per pair of ``requests``, from what a
    scorer returned (``answers``) or raised (``error``): a scorer that raised
    or answered the wrong shape fails every pair it was asked for."""
    if error is not None:
        reason = f"scorer raised {type(error).__name__}: {error}"
        return [[PairScore.failure(reason)] * len(m) for _, m in requests]
    if not isinstance(answers, Sequence) or len(answers) != len(requests):
        got = len(answers) if isinstance(answers, Sequence) else type(answers).__name__
        reason = f"wrong length: {got} answers for {len(requests)} requests"
        return [[PairScore.failure(reason)] * len(m) for _, m in requests]
    out = []
    for (_, memories), row in zip(requests, answers, strict=True):
        if not isinstance(row, Sequence) or len(row) != len(memories):
            got = len(row) if isinstance(row, Sequence) else type(row).__name__
            reason = f"wrong length: {got} scores for {len(memories)} pairs"
            out.append([PairScore.failure(reason)] * len(memories))
        else:
            out.append([validated(answer) for answer in row])
    return out


class Paying:
    """The scorer-paying half of :class:`OnlineRetriever`."""

    def _score(self, requests: list[tuple[str, list[str]]]) -> list[list[PairScore]]:
        """The scorer's answers, each validated; every fault becomes a failure."""
        if not requests:
            return []
        pending = Pending(self.scorer, requests)
        timeout = self.config.scorer_timeout
        if not pending.done.wait(timeout):
            reason = f"timeout after {timeout:g} s"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        return checked_answers(requests, pending.result, pending.error)

    def _prepare(self, text: str, query: Query, index: int, state: SolverState):
        """Anchors of a query (rows, pool positions) and its cached scores."""
        select, _ = self._functions()
        anchors = np.asarray(select(self._key("select", index), state, query))
        positions = np.flatnonzero(anchors)
        rows = np.asarray(query.candidates)[positions]
        cached = self._journal.get_scores(
            self._scorer_key, text, [self._texts[r] for r in rows]
        )
        return positions, rows, cached

    def _pay(
        self, text: str, rows, cached, index: int, known=None
    ) -> tuple[list[PairScore], int, int]:
        """Answers for the anchors: stored ones, then the scorer for the rest.

        ``known`` maps memory texts to answers this query has already (the
        asynchronous path pays ahead, :mod:`earm_jax.retriever.asynchronous`);
        they count as neither calls nor cache hits here.
        """
        known = known or {}
        texts = [self._texts[r] for r in rows]
        missing = list(
            dict.fromkeys(
                t
                for t, v in zip(texts, cached, strict=True)
                if v is None and t not in known
            )
        )
        fresh = dict(
            zip(
                missing,
                self._score([(text, missing)])[0] if missing else [],
                strict=True,
            )
        )
        self._journal.put_scores(
            self._scorer_key,
            [(text, m, a.value) for m, a in fresh.items() if a.ok],
            index,
        )
        answers = [
            known[t]
            if t in known
            else PairScore.success(v)
            if v is not None
            else fresh[t]
            for t, v in zip(texts, cached, strict=True)
        ]
        hits = sum(
            v is not None and t not in known for t, v in zip(texts, cached, strict=True)
        )
        return answers, len(missing), hits

    @serialized
    def usage(self) -> Usage:
        """What this retriever has paid, from its journal (all its life)."""
        self._check_open()
        if self._usage_totals is None:
            size = self.config.pool_size
            totals = [0, 0, 0]
            for _, kind, payload, data in self._journal.ops_after(0):
                if kind != "query":
                    continue
                totals[0] += int(payload.get("calls", 0))
                totals[1] += int(payload.get("cache_hits", 0))
                # The pool's fields lead the record (an embedding may follow).
                if data is not None and len(data) >= 14 * size:
                    valid = np.frombuffer(data[8 * size : 9 * size], np.bool_)
                    totals[2] += int(valid.sum())
            self._usage_totals = totals
        calls, hits, full = self._usage_totals
        return Usage(
            memories=self.num_memories,
            queries=self._count,
            calls=calls,
            cache_hits=hits,
            full_pool_calls=full,
        )
