"""Parsing one LoCoMo conversation, repairing its known faults.

Each fault is repaired where the intent is clear or dropped, and recorded as a
:class:`~earm_jax.locomo.records.DataFault`; parsing never crashes on them.
Input that is not LoCoMo at all (wrong types, no sessions) raises ``ValueError``
naming the field and value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from earm_jax.locomo.records import (
    ALL_CATEGORIES,
    DANGLING_EVIDENCE_ID,
    DANGLING_OBSERVATION_ID,
    DATE_WITHOUT_SESSION,
    DUPLICATE_EVIDENCE_ID,
    DUPLICATE_QUESTION,
    DUPLICATE_TURN_ID,
    EMPTY_EVIDENCE,
    MALFORMED_EVIDENCE_ID,
    MALFORMED_OBSERVATION,
    MALFORMED_QUESTION,
    MALFORMED_TURN,
    MULTI_ID_OBSERVATION,
    QUERY_CATEGORIES,
    SESSION_WITHOUT_DATE,
    Conversation,
    DataFault,
    ObservationFact,
    Question,
    Session,
    Turn,
)

_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_KEY = re.compile(r"session_(\d+)_date_time")
_OBSERVATION_KEY = re.compile(r"session_(\d+)_observation")
# Tolerant dia_id grammar: "D3:7", "D:11:26", "D30:05", "d3 : 7".
_DIA_ID = re.compile(r"[Dd]\s*:?\s*(\d+)\s*:\s*(\d+)")
_ID_SEPARATORS = re.compile(r"[;,\s]+(?=[Dd])")


def canonical_dia_id(raw: str) -> str | None:
    """Returns ``"D<s>:<t>"`` for a parseable id, else ``None``.

    ``"D:11:26"`` -> ``"D11:26"``, ``"D30:05"`` -> ``"D30:5"``, ``"D"`` -> ``None``.

    Args:
      raw: one id as written in the data.
    """
    match = _DIA_ID.fullmatch(raw.strip())
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def split_dia_ids(raw: str) -> list[str]:
    """Splits a string naming several ids (``"D8:6; D9:17"``) into its parts."""
    return [part for part in _ID_SEPARATORS.split(raw.strip()) if part]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


class _FaultLog:
    def __init__(self, conversation: str) -> None:
        self.conversation = conversation
        self.faults: list[DataFault] = []

    def add(self, kind: str, detail: str, action: str) -> None:
        self.faults.append(DataFault(self.conversation, kind, detail, action))

    def amend_last(self, more_action: str) -> None:
        last = self.faults[-1]
        self.faults[-1] = dataclasses.replace(last, action=last.action + more_action)


def _parse_turns(
    number: int, raw_turns: Any, seen_ids: set[str], log: _FaultLog
) -> tuple[Turn, ...]:
    if not isinstance(raw_turns, list):
        raise ValueError(
            f"conversation {log.conversation!r}: field 'session_{number}' must be a "
            f"list of turns, got {type(raw_turns).__name__}"
        )
    turns: list[Turn] = []
    for position, raw in enumerate(raw_turns):
        where = f"session_{number}[{position}]"
        if not isinstance(raw, Mapping):
            log.add(MALFORMED_TURN, f"{where} is {type(raw).__name__}", "dropped")
            continue
        speaker, text = _text(raw.get("speaker")), _text(raw.get("text"))
        raw_id = raw.get("dia_id")
        dia_id = canonical_dia_id(raw_id) if isinstance(raw_id, str) else None
        if speaker is None or text is None or dia_id is None:
            log.add(
                MALFORMED_TURN,
                f"{where} speaker={raw.get('speaker')!r} dia_id={raw_id!r} "
                f"text={str(raw.get('text'))[:40]!r}",
                "dropped",
            )
            continue
        if dia_id != raw_id:
            log.add(
                MALFORMED_TURN,
                f"{where} dia_id {raw_id!r}",
                f"repaired: {dia_id!r}",
            )
        if dia_id in seen_ids:
            log.add(
                DUPLICATE_TURN_ID, f"{where} dia_id {dia_id!r}", "dropped (later copy)"
            )
            continue
        seen_ids.add(dia_id)
        caption = _text(raw.get("blip_caption"))
        turns.append(Turn(dia_id, speaker, text, caption or None, number))
    return tuple(turns)


def _repair_ids(
    raw_ids: Sequence[Any],
    known_ids: set[str],
    where: str,
    log: _FaultLog,
    *,
    malformed_kind: str,
    dangling_kind: str,
) -> tuple[str, ...]:
    """Canonical, existing, de-duplicated ids; every change is logged."""
    repaired: list[str] = []
    for raw in raw_ids:
        if not isinstance(raw, str):
            log.add(malformed_kind, f"{where} id {raw!r}", "dropped")
            continue
        parts = split_dia_ids(raw)
        canonicals = [canonical_dia_id(part) for part in parts]
        usable = [one for one in canonicals if one is not None]
        if not usable:
            log.add(malformed_kind, f"{where} id {raw!r}", "dropped")
            continue
        if len(parts) > 1 or usable != [raw]:
            unparsed = [
                part for part, one in zip(parts, canonicals, strict=True) if one is None
            ]
            action = (
                f"repaired: {usable}" if len(usable) > 1 else f"repaired: {usable[0]!r}"
            )
            if unparsed:
                action += f", dropped {unparsed}"
            log.add(malformed_kind, f"{where} id {raw!r}", action)
        for canonical in usable:
            if canonical not in known_ids:
                log.add(dangling_kind, f"{where} id {canonical!r}", "dropped")
            elif canonical in repaired:
                log.add(DUPLICATE_EVIDENCE_ID, f"{where} id {canonical!r}", "dropped")
            else:
                repaired.append(canonical)
    return tuple(repaired)


def _parse_observations(
    number: int, raw: Any, known_ids: set[str], log: _FaultLog
) -> list[ObservationFact]:
    key = f"session_{number}_observation"
    if not isinstance(raw, Mapping):
        log.add(MALFORMED_OBSERVATION, f"{key} is {type(raw).__name__}", "dropped")
        return []
    facts: list[ObservationFact] = []
    for speaker, items in raw.items():
        if not isinstance(items, list):
            log.add(MALFORMED_OBSERVATION, f"{key}[{speaker!r}] not a list", "dropped")
            continue
        for position, item in enumerate(items):
            where = f"{key}[{speaker!r}][{position}]"
            valid = isinstance(item, list | tuple) and len(item) == 2
            text = _text(item[0]) if valid else None
            if text is None:
                log.add(MALFORMED_OBSERVATION, f"{where} = {item!r:.80}", "dropped")
                continue
            id_field = item[1]
            raw_ids = [id_field] if isinstance(id_field, str) else id_field
            if not isinstance(raw_ids, list | tuple):
                log.add(
                    MALFORMED_OBSERVATION, f"{where} dia_id {id_field!r}", "dropped"
                )
                continue
            parts: list[Any] = []
            for one in raw_ids:
                parts += split_dia_ids(one) if isinstance(one, str) else [one]
            names_several = len(parts) > 1
            dia_ids = _repair_ids(
                parts,
                known_ids,
                where,
                log,
                malformed_kind=MALFORMED_OBSERVATION,
                dangling_kind=DANGLING_OBSERVATION_ID,
            )
            if not dia_ids:
                if parts:  # its ids were logged just above: say the fact went too
                    log.amend_last(", and the fact (no usable dia_id left)")
                else:
                    log.add(MALFORMED_OBSERVATION, f"{where} has no dia_id", "dropped")
                continue
            if names_several:
                log.add(
                    MULTI_ID_OBSERVATION,
                    f"{where} dia_id {id_field!r}",
                    f"repaired: one memory naming {list(dia_ids)}",
                )
            facts.append(ObservationFact(str(speaker), text, dia_ids, number))
    return facts


def _parse_question(
    index: int, raw: Any, known_ids: set[str], log: _FaultLog
) -> Question | None:
    where = f"qa[{index}]"
    if isinstance(raw, Mapping):
        where += f" (category {raw.get('category')!r})"
    else:
        log.add(MALFORMED_QUESTION, f"{where} is {type(raw).__name__}", "dropped")
        return None
    question = _text(raw.get("question"))
    category = raw.get("category")
    if (
        question is None
        or isinstance(category, bool)
        or not isinstance(category, int)
        or category not in ALL_CATEGORIES
    ):
        log.add(
            MALFORMED_QUESTION,
            f"{where} question={raw.get('question')!r:.60} category={category!r}",
            "dropped",
        )
        return None
    raw_evidence = raw.get("evidence", [])
    if isinstance(raw_evidence, str):
        raw_evidence = [raw_evidence]
    if not isinstance(raw_evidence, list):
        log.add(MALFORMED_EVIDENCE_ID, f"{where} evidence {raw_evidence!r}", "dropped")
        raw_evidence = []
    evidence = _repair_ids(
        raw_evidence,
        known_ids,
        where,
        log,
        malformed_kind=MALFORMED_EVIDENCE_ID,
        dangling_kind=DANGLING_EVIDENCE_ID,
    )
    if not raw_evidence:
        log.add(
            EMPTY_EVIDENCE,
            f"{where} {question!r:.60}",
            "kept: no relevant memory, left out of recall metrics",
        )
    elif not evidence:
        log.add(
            EMPTY_EVIDENCE,
            f"{where} no usable evidence id left",
            "kept: no relevant memory, left out of recall metrics",
        )
    return Question(
        index=index,
        question=question,
        answer=_text(raw.get("answer")),
        adversarial_answer=_text(raw.get("adversarial_answer")),
        evidence=evidence,
        raw_evidence=tuple(str(one) for one in raw_evidence),
        category=category,
    )


def _flag_duplicate_questions(qa: Sequence[Question], log: _FaultLog) -> None:
    first_seen: dict[tuple[str, int], int] = {}
    for question in qa:
        if question.category not in QUERY_CATEGORIES:
            continue
        key = (" ".join(question.question.lower().split()), question.category)
        if key in first_seen:
            log.add(
                DUPLICATE_QUESTION,
                f"qa[{question.index}] repeats qa[{first_seen[key]}] "
                f"{question.question!r:.60}",
                "kept: a repeated query is a separate query (the counts include it)",
            )
        else:
            first_seen[key] = question.index


def parse_conversation(raw: Mapping[str, Any], sample_id: str) -> Conversation:
    """Builds a :class:`Conversation` from the flat per-conversation dict.

    Args:
      raw: the per-conversation form (``speaker_a``, ``session_N``, ``qa``, ...).
      sample_id: the conversation's id.

    Returns:
      The repaired conversation with its fault list.

    Raises:
      ValueError: when the input is not a LoCoMo conversation (field named).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"conversation {sample_id!r} must be a JSON object, "
            f"got {type(raw).__name__}"
        )
    speakers = (_text(raw.get("speaker_a")), _text(raw.get("speaker_b")))
    if speakers[0] is None or speakers[1] is None:
        raise ValueError(
            f"conversation {sample_id!r}: fields 'speaker_a'/'speaker_b' must be "
            f"strings, got {raw.get('speaker_a')!r}/{raw.get('speaker_b')!r}"
        )
    log = _FaultLog(sample_id)
    session_numbers = sorted(
        int(match.group(1)) for key in raw if (match := _SESSION_KEY.fullmatch(key))
    )
    if not session_numbers:
        raise ValueError(
            f"conversation {sample_id!r}: no 'session_N' field "
            f"(keys: {sorted(raw)[:8]})"
        )
    date_numbers = sorted(
        int(match.group(1)) for key in raw if (match := _DATE_KEY.fullmatch(key))
    )
    for number in date_numbers:
        if number not in session_numbers:
            log.add(
                DATE_WITHOUT_SESSION,
                f"session_{number}_date_time {raw[f'session_{number}_date_time']!r}",
                "ignored",
            )
    seen_ids: set[str] = set()
    sessions: list[Session] = []
    for number in session_numbers:
        date_time = _text(raw.get(f"session_{number}_date_time"))
        if date_time is None:
            log.add(SESSION_WITHOUT_DATE, f"session_{number}", "kept with date ''")
            date_time = ""
        turns = _parse_turns(number, raw[f"session_{number}"], seen_ids, log)
        sessions.append(Session(number, date_time, turns))
    observation_numbers = sorted(
        int(match.group(1)) for key in raw if (match := _OBSERVATION_KEY.fullmatch(key))
    )
    observations: list[ObservationFact] = []
    for number in observation_numbers:
        observations += _parse_observations(
            number, raw[f"session_{number}_observation"], seen_ids, log
        )
    raw_qa = raw.get("qa", [])
    if not isinstance(raw_qa, list):
        raise ValueError(
            f"conversation {sample_id!r}: field 'qa' must be a list, "
            f"got {type(raw_qa).__name__}"
        )
    qa = [
        question
        for index, item in enumerate(raw_qa)
        if (question := _parse_question(index, item, seen_ids, log)) is not None
    ]
    _flag_duplicate_questions(qa, log)
    return Conversation(
        sample_id=sample_id,
        speakers=(speakers[0], speakers[1]),
        sessions=tuple(sessions),
        observations=tuple(observations),
        qa=tuple(qa),
        faults=tuple(log.faults),
    )


__all__ = ["canonical_dia_id", "parse_conversation", "split_dia_ids"]
