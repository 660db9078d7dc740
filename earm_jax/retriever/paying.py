"""Paying the scorer (:class:`ScorerPath`, the retriever's ``payer``): one
request in a daemon thread (so a hang never blocks the caller), every answer
validated, every fault turned into a per-pair failure that is counted and
never observed as a score, every fresh answer committed to the journal's
score cache the moment it arrives."""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from earm_jax.scoring.base import PairScore, Scorer
from earm_jax.store.journal import Journal

_T = TypeVar("_T")


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


class ScorerPath:
    """How a retriever pays its scorer: the scorer, its identity in the
    journal's score cache, and the count of failed pairs by kind.

    Args:
      scorer: the relevance scorer (``None`` in similarity mode: never called).
      scorer_key: the scorer's identity, as the journal keys its answers.
      journal: the folder's journal (read for stored answers, written with
        every fresh one the moment it arrives; owned by the retriever).
      timeout: seconds a request may take before its pairs fail.
    """

    def __init__(
        self, scorer: Scorer | None, scorer_key: str, journal: Journal, timeout: float
    ) -> None:
        self.scorer = scorer
        self.key = scorer_key
        self.journal = journal
        self.timeout = timeout
        self.failure_counts: Counter[str] = Counter()

    def score(self, requests: list[tuple[str, list[str]]]) -> list[list[PairScore]]:
        """The scorer's answers, each validated; every fault becomes a failure."""
        if not requests:
            return []
        pending = Pending(self.scorer, requests)
        if not pending.done.wait(self.timeout):
            reason = f"timeout after {self.timeout:g} s"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        return checked_answers(requests, pending.result, pending.error)

    async def ascore(
        self, requests: list[tuple[str, list[str]]]
    ) -> list[list[PairScore]]:
        """:meth:`score`, awaited: the scorer's ``ascore_many`` or a daemon
        thread; every fault becomes a failure."""
        if not requests:
            return []
        native = getattr(self.scorer, "ascore_many", None)
        try:
            if native is not None:
                call = native(requests)
            else:
                call = in_daemon_thread(self.scorer.score_many, requests)
            answers = await asyncio.wait_for(call, self.timeout)
        except TimeoutError:
            reason = f"timeout after {self.timeout:g} s"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        except Exception as error:  # noqa: BLE001 - reported per pair
            return checked_answers(requests, None, error)
        return checked_answers(requests, answers)

    def cached(self, text: str, memories: Sequence[str]) -> list[float | None]:
        """The stored answers of ``(text, memory)`` pairs (``None``: unpaid)."""
        return self.journal.get_scores(self.key, text, list(memories))

    def store(self, text: str, answers: Mapping[str, PairScore], index: int) -> None:
        """Commits the successful ``answers`` (by memory text) of query ``index``."""
        self.journal.put_scores(
            self.key,
            [(text, m, a.value) for m, a in answers.items() if a.ok],
            index,
        )

    def pay(
        self, text: str, memories: Sequence[str], cached, index: int, known=None
    ) -> tuple[list[PairScore], int, int]:
        """Answers for the anchors' memory texts: stored ones, then the scorer
        for the rest (committed before they are returned).

        ``known`` maps memory texts to answers this query has already (the
        asynchronous path pays ahead, :mod:`earm_jax.retriever.asynchronous`);
        they count as neither calls nor cache hits here.
        """
        known = known or {}
        missing = list(
            dict.fromkeys(
                t
                for t, v in zip(memories, cached, strict=True)
                if v is None and t not in known
            )
        )
        fresh = dict(
            zip(
                missing,
                self.score([(text, missing)])[0] if missing else [],
                strict=True,
            )
        )
        self.store(text, fresh, index)
        answers = [
            known[t]
            if t in known
            else PairScore.success(v)
            if v is not None
            else fresh[t]
            for t, v in zip(memories, cached, strict=True)
        ]
        hits = sum(
            v is not None and t not in known
            for t, v in zip(memories, cached, strict=True)
        )
        return answers, len(missing), hits

    def count_failure(self, reason: str) -> None:
        self.failure_counts[failure_kind(reason)] += 1


def in_daemon_thread(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """``fn(*args)`` in a new daemon thread, as a future of the running loop
    (a daemon, so a scorer that never returns never holds the process)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn(*args)
        except BaseException as caught:  # noqa: BLE001 - reported per pair
            error = caught
        try:
            loop.call_soon_threadsafe(deliver, result, error)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name="earm-scorer-call", daemon=True).start()
    return future


def other_scorer(directory: Any, stored: str, scorer: Any, given: str) -> ValueError:
    """The refusal of a folder holding the experience of scorer key ``stored``
    opened with ``scorer`` (key ``given``): scores of two scorers never mix.
    Where ``scorer`` blends the very model the folder holds with the cosine
    (:class:`~earm_jax.scoring.similarity_blend.BlendedScorer`: ``model_scorer``,
    ``earm mcp --scorer-model``), it names the way to open it."""
    inner = getattr(scorer, "inner", None)
    unblended = (
        getattr(inner, "identity", None) is not None and inner.identity.key() == stored
    )
    way_out = (
        "it holds this model's answers without the similarity blend: open it "
        "with the model alone (earm mcp --no-scorer-blend; CrossEncoderScorer, "
        "not model_scorer)"
        if unblended
        else "use a new folder for this scorer"
    )
    return ValueError(
        f"{directory} holds the experience of scorer {stored!r}, not {given!r}: "
        f"scores of two scorers are never mixed in one matrix; {way_out}"
    )


__all__ = [
    "ScorerPath",
    "checked_answers",
    "failure_kind",
    "in_daemon_thread",
    "other_scorer",
]
