"""LoCoMo's records after repair: conversations, sessions, turns, observation
facts, questions, and the data faults found while reading them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

QUERY_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
"""LoCoMo categories used as queries (5 is adversarial and left out)."""

ALL_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4, 5)

# Fault kinds (``DataFault.kind``).
MALFORMED_EVIDENCE_ID = "malformed_evidence_id"
DANGLING_EVIDENCE_ID = "dangling_evidence_id"
DUPLICATE_EVIDENCE_ID = "duplicate_evidence_id"
EMPTY_EVIDENCE = "empty_evidence"
DUPLICATE_QUESTION = "duplicate_question"
MALFORMED_QUESTION = "malformed_question"
MULTI_ID_OBSERVATION = "multi_id_observation"
MALFORMED_OBSERVATION = "malformed_observation"
DANGLING_OBSERVATION_ID = "dangling_observation_id"
MALFORMED_TURN = "malformed_turn"
DUPLICATE_TURN_ID = "duplicate_turn_id"
DATE_WITHOUT_SESSION = "date_without_session"
SESSION_WITHOUT_DATE = "session_without_date"

FAULT_KINDS: tuple[str, ...] = (
    MALFORMED_EVIDENCE_ID,
    DANGLING_EVIDENCE_ID,
    DUPLICATE_EVIDENCE_ID,
    EMPTY_EVIDENCE,
    DUPLICATE_QUESTION,
    MALFORMED_QUESTION,
    MULTI_ID_OBSERVATION,
    MALFORMED_OBSERVATION,
    DANGLING_OBSERVATION_ID,
    MALFORMED_TURN,
    DUPLICATE_TURN_ID,
    DATE_WITHOUT_SESSION,
    SESSION_WITHOUT_DATE,
)


@dataclasses.dataclass(frozen=True)
class DataFault:
    """One fault found in the input and what was done about it.

    Attributes:
      conversation: the sample id.
      kind: one of ``FAULT_KINDS``.
      detail: where and what (e.g. ``"qa[37] evidence 'D8:6; D9:17'"``).
      action: what the loader did (``"repaired: ..."``, ``"dropped"``, ``"kept"``).
    """

    conversation: str
    kind: str
    detail: str
    action: str


@dataclasses.dataclass(frozen=True)
class Turn:
    """One dialog turn.

    Attributes:
      dia_id: canonical id ``"D<session>:<turn>"``.
      speaker: who spoke.
      text: what was said.
      image_caption: the BLIP caption of a shared image, or ``None``.
      session: 1-based session number.
    """

    dia_id: str
    speaker: str
    text: str
    image_caption: str | None
    session: int


@dataclasses.dataclass(frozen=True)
class Session:
    """One session of a conversation.

    Attributes:
      number: 1-based session number (``session_N``).
      date_time: e.g. ``"1:56 pm on 8 May, 2023"`` ("" where the data has none).
      turns: the turns in order.
    """

    number: int
    date_time: str
    turns: tuple[Turn, ...]


@dataclasses.dataclass(frozen=True)
class ObservationFact:
    """One ``session_N_observation`` fact.

    Attributes:
      speaker: whom the fact is about.
      text: the fact.
      dia_ids: the turns it was drawn from (canonical ids, usually one).
      session: 1-based session number.
    """

    speaker: str
    text: str
    dia_ids: tuple[str, ...]
    session: int


@dataclasses.dataclass(frozen=True)
class Question:
    """One QA item.

    Attributes:
      index: position in the conversation's ``qa`` list.
      question: the question text.
      answer: the gold answer as text (``None`` for adversarial questions).
      adversarial_answer: category 5's ``adversarial_answer`` (else ``None``).
      evidence: repaired canonical evidence ids (existing turns, no duplicates).
      raw_evidence: the evidence as given in the file, for reports.
      category: LoCoMo category id, 1..5.
    """

    index: int
    question: str
    answer: str | None
    adversarial_answer: str | None
    evidence: tuple[str, ...]
    raw_evidence: tuple[str, ...]
    category: int


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A LoCoMo conversation after repair.

    Attributes:
      sample_id: ``"26"`` (per-conversation file stem) or ``"conv-26"`` (single file).
      speakers: ``(speaker_a, speaker_b)``.
      sessions: sessions with turns, by number.
      observations: observation facts in session order.
      qa: all QA items in file order (all categories).
      faults: every fault found and what was done.
    """

    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    observations: tuple[ObservationFact, ...]
    qa: tuple[Question, ...]
    faults: tuple[DataFault, ...]

    @property
    def turns(self) -> tuple[Turn, ...]:
        """All turns in conversation order."""
        return tuple(turn for session in self.sessions for turn in session.turns)

    def queries(
        self, categories: Iterable[int] = QUERY_CATEGORIES
    ) -> tuple[Question, ...]:
        """The questions of the given categories, in file order."""
        wanted = frozenset(categories)
        return tuple(question for question in self.qa if question.category in wanted)


__all__ = [
    "ALL_CATEGORIES",
    "FAULT_KINDS",
    "QUERY_CATEGORIES",
    "Conversation",
    "DataFault",
    "ObservationFact",
    "Question",
    "Session",
    "Turn",
]
