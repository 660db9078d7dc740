"""The two LoCoMo memory settings, their relevance labels and insertion times.

* ``turns`` (primary): one memory per dialog turn, ``"speaker: text"`` plus the
  shared image's caption; relevant = the turns named in the question's evidence.
* ``observations``: one memory per ``session_N_observation`` fact; relevant =
  the facts drawn from an evidence turn. About 20% of evidence turns have no
  fact, so some questions have no relevant memory: they still run as queries
  (they cost calls and teach the matrix) but are left out of recall metrics.

Queries are the conversation's category 1-4 questions in file order. Memory
rows are numbered in conversation order and stay fixed for the whole stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal, get_args

import numpy as np

from earm_jax.locomo.data import (
    QUERY_CATEGORIES,
    Conversation,
    DataFault,
    Question,
    Turn,
)

Setting = Literal["turns", "observations"]
SETTINGS: tuple[str, ...] = get_args(Setting)

InsertionRule = Literal["all_at_start", "after_evidence_session"]
"""When a memory enters the stream (its ``insert_time``, a query index).

* ``"all_at_start"`` (default, the LoCoMo paper's protocol): LoCoMo questions
  carry no timestamp and are asked after the whole conversation, so every
  memory exists before the first query (``insert_time = 0``).
* ``"after_evidence_session"``: an incremental variant. Query ``t`` is placed
  at session ``sigma_t`` = the running maximum, over queries ``0..t``, of the
  latest session in their evidence; a memory of session ``s`` is inserted at
  the first query with ``sigma_t >= s`` (``T`` if none: it never enters). Every
  query's evidence therefore exists when it is asked, and memories arrive
  session by session as the questions move forward through the conversation.
"""
INSERTION_RULES: tuple[str, ...] = get_args(InsertionRule)


@dataclasses.dataclass(frozen=True)
class Memory:
    """One memory (a row of the experience matrix).

    Attributes:
      row: its row id, ``0 .. M-1`` in conversation order.
      text: the text embedded and shown to a scorer.
      dia_ids: the turn(s) it comes from.
      speaker: who said it / whom the fact is about.
      session: 1-based session number.
      date_time: the session's date ("" where the data has none).
    """

    row: int
    text: str
    dia_ids: tuple[str, ...]
    speaker: str
    session: int
    date_time: str

    def dated_text(self) -> str:
        """``"[<session date>] <text>"``, e.g. for an answer context."""
        return f"[{self.date_time}] {self.text}" if self.date_time else self.text


@dataclasses.dataclass(frozen=True)
class MemorySet:
    """A conversation's memories in one setting, with the labelled queries.

    Attributes:
      sample_id: the conversation id.
      setting: ``"turns"`` or ``"observations"``.
      memories: ``M`` memories by row.
      queries: ``T`` questions (categories 1-4, file order).
      relevant_rows: per query, the relevant memory rows (sorted; may be empty).
      faults: the conversation's data faults.
    """

    sample_id: str
    setting: str
    memories: tuple[Memory, ...]
    queries: tuple[Question, ...]
    relevant_rows: tuple[tuple[int, ...], ...]
    faults: tuple[DataFault, ...]

    @property
    def unlabelled(self) -> tuple[int, ...]:
        """Positions of queries with no relevant memory (run, but not in recall)."""
        return tuple(t for t, rows in enumerate(self.relevant_rows) if not rows)

    def relevance_matrix(self) -> np.ndarray:
        """``bool[T, M]``: whether memory ``m`` is relevant to query ``t``."""
        matrix = np.zeros((len(self.queries), len(self.memories)), dtype=bool)
        for t, rows in enumerate(self.relevant_rows):
            matrix[t, list(rows)] = True
        return matrix


def turn_text(turn: Turn) -> str:
    """``"speaker: text"``, plus ``" [image: caption]"`` when a photo was shared."""
    text = f"{turn.speaker}: {turn.text.strip()}"
    if turn.image_caption:
        text += f" [image: {turn.image_caption.strip()}]"
    return text


def _turn_memories(conversation: Conversation) -> tuple[Memory, ...]:
    dates = {session.number: session.date_time for session in conversation.sessions}
    return tuple(
        Memory(
            row=row,
            text=turn_text(turn),
            dia_ids=(turn.dia_id,),
            speaker=turn.speaker,
            session=turn.session,
            date_time=dates[turn.session],
        )
        for row, turn in enumerate(conversation.turns)
    )


def _observation_memories(conversation: Conversation) -> tuple[Memory, ...]:
    dates = {session.number: session.date_time for session in conversation.sessions}
    return tuple(
        Memory(
            row=row,
            text=fact.text.strip(),
            dia_ids=fact.dia_ids,
            speaker=fact.speaker,
            session=fact.session,
            date_time=dates.get(fact.session, ""),
        )
        for row, fact in enumerate(conversation.observations)
    )


def build_memories(
    conversation: Conversation,
    setting: Setting = "turns",
    categories: Iterable[int] = QUERY_CATEGORIES,
) -> MemorySet:
    """Builds one memory setting of a conversation.

    Args:
      conversation: a loaded conversation.
      setting: ``"turns"`` or ``"observations"``.
      categories: question categories used as queries.

    Returns:
      The memories, the queries and each query's relevant rows.

    Raises:
      ValueError: unknown ``setting``.
    """
    if setting == "turns":
        memories = _turn_memories(conversation)
    elif setting == "observations":
        memories = _observation_memories(conversation)
    else:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    rows_by_dia_id: dict[str, list[int]] = {}
    for memory in memories:
        for dia_id in memory.dia_ids:
            rows_by_dia_id.setdefault(dia_id, []).append(memory.row)
    queries = conversation.queries(categories)
    relevant_rows = tuple(
        tuple(
            sorted(
                {row for dia_id in q.evidence for row in rows_by_dia_id.get(dia_id, ())}
            )
        )
        for q in queries
    )
    return MemorySet(
        sample_id=conversation.sample_id,
        setting=setting,
        memories=memories,
        queries=queries,
        relevant_rows=relevant_rows,
        faults=conversation.faults,
    )


def _evidence_session(question: Question) -> int:
    return max(
        (int(dia_id[1:].split(":")[0]) for dia_id in question.evidence), default=0
    )


def insertion_times(
    memory_set: MemorySet, rule: InsertionRule = "all_at_start"
) -> np.ndarray:
    """``int32[M]``: the first query index at which each memory exists.

    Args:
      memory_set: memories and queries of one conversation.
      rule: see :data:`InsertionRule`.

    Raises:
      ValueError: unknown ``rule``.
    """
    num_memories = len(memory_set.memories)
    if rule == "all_at_start":
        return np.zeros(num_memories, dtype=np.int32)
    if rule != "after_evidence_session":
        raise ValueError(
            f"insertion rule must be one of {INSERTION_RULES}, got {rule!r}"
        )
    if not memory_set.queries:
        return np.zeros(num_memories, dtype=np.int32)
    reached = np.maximum.accumulate(
        np.array([_evidence_session(q) for q in memory_set.queries], dtype=np.int64)
    )
    sessions = np.array([m.session for m in memory_set.memories], dtype=np.int64)
    # First t with reached[t] >= session (reached is non-decreasing); T if none.
    return np.searchsorted(reached, sessions, side="left").astype(np.int32)


__all__ = [
    "INSERTION_RULES",
    "SETTINGS",
    "InsertionRule",
    "Memory",
    "MemorySet",
    "Setting",
    "build_memories",
    "insertion_times",
    "turn_text",
]
