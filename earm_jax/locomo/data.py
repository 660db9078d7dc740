"""Load LoCoMo conversations into typed dataclasses, repairing known data faults.

Two input forms are read:

* the single file ``locomo10.json``: a list of samples
  ``{"sample_id", "conversation": {speaker_a, speaker_b, session_N,
  session_N_date_time}, "qa", "observation": {"session_N_observation": ...}, ...}``;
* one file per conversation (``26.json``, ...): a flat dict holding
  ``speaker_a``, ``speaker_b``, ``session_N``, ``session_N_date_time``,
  ``session_N_observation`` and ``qa``; the file stem is the sample id.

LoCoMo has known faults (malformed or dangling evidence ids, empty evidence,
duplicated questions, observations naming several turns, ...). Each one is
repaired where the intent is clear or dropped (:mod:`earm_jax.locomo.repair`),
and recorded as a :class:`DataFault` (:mod:`earm_jax.locomo.records`); loading
never crashes on them. Input that is not LoCoMo at
all (not JSON, wrong top-level type, no sessions) raises ``ValueError`` naming
the field and value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from earm_jax.locomo import records as _records
from earm_jax.locomo.records import ALL_CATEGORIES as ALL_CATEGORIES
from earm_jax.locomo.records import DANGLING_EVIDENCE_ID as DANGLING_EVIDENCE_ID
from earm_jax.locomo.records import DANGLING_OBSERVATION_ID as DANGLING_OBSERVATION_ID
from earm_jax.locomo.records import DATE_WITHOUT_SESSION as DATE_WITHOUT_SESSION
from earm_jax.locomo.records import DUPLICATE_EVIDENCE_ID as DUPLICATE_EVIDENCE_ID
from earm_jax.locomo.records import DUPLICATE_QUESTION as DUPLICATE_QUESTION
from earm_jax.locomo.records import DUPLICATE_TURN_ID as DUPLICATE_TURN_ID
from earm_jax.locomo.records import EMPTY_EVIDENCE as EMPTY_EVIDENCE
from earm_jax.locomo.records import FAULT_KINDS as FAULT_KINDS
from earm_jax.locomo.records import MALFORMED_EVIDENCE_ID as MALFORMED_EVIDENCE_ID
from earm_jax.locomo.records import MALFORMED_OBSERVATION as MALFORMED_OBSERVATION
from earm_jax.locomo.records import MALFORMED_QUESTION as MALFORMED_QUESTION
from earm_jax.locomo.records import MALFORMED_TURN as MALFORMED_TURN
from earm_jax.locomo.records import MULTI_ID_OBSERVATION as MULTI_ID_OBSERVATION
from earm_jax.locomo.records import QUERY_CATEGORIES as QUERY_CATEGORIES
from earm_jax.locomo.records import SESSION_WITHOUT_DATE as SESSION_WITHOUT_DATE
from earm_jax.locomo.records import Conversation as Conversation
from earm_jax.locomo.records import DataFault as DataFault
from earm_jax.locomo.records import ObservationFact as ObservationFact
from earm_jax.locomo.records import Question as Question
from earm_jax.locomo.records import Session as Session
from earm_jax.locomo.records import Turn as Turn
from earm_jax.locomo.repair import canonical_dia_id as canonical_dia_id
from earm_jax.locomo.repair import parse_conversation as parse_conversation
from earm_jax.locomo.repair import split_dia_ids as split_dia_ids


def flatten_sample(sample: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Turns one ``locomo10.json`` sample into ``(sample_id, per-conversation dict)``.

    Raises:
      ValueError: when ``sample_id`` or ``conversation`` is missing or mistyped.
    """
    if not isinstance(sample, Mapping):
        raise ValueError(
            f"a locomo10.json sample must be an object, got {sample!r:.60}"
        )
    sample_id = sample.get("sample_id")
    if not isinstance(sample_id, str | int) or isinstance(sample_id, bool):
        raise ValueError(
            f"sample field 'sample_id' must be a string, got {sample_id!r}"
        )
    conversation = sample.get("conversation")
    if not isinstance(conversation, Mapping):
        raise ValueError(
            f"sample {sample_id!r}: field 'conversation' must be an object, "
            f"got {type(conversation).__name__}"
        )
    flat: dict[str, Any] = dict(conversation)
    observation = sample.get("observation", {})
    if isinstance(observation, Mapping):
        flat.update(observation)
    flat["qa"] = sample.get("qa", [])
    return str(sample_id), flat


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error


def load_file(path: str | Path) -> list[Conversation]:
    """Loads one JSON file: the single-file list form or one conversation.

    Args:
      path: ``locomo10.json`` (a list of samples) or ``<id>.json`` (one conversation,
        whose stem becomes the sample id unless it holds a ``sample_id``).
    """
    path = Path(path)
    data = _read_json(path)
    if isinstance(data, list):
        return [
            parse_conversation(flat, sid) for sid, flat in map(flatten_sample, data)
        ]
    if isinstance(data, Mapping) and "conversation" in data:
        sample_id, flat = flatten_sample(data)
        return [parse_conversation(flat, sample_id)]
    if isinstance(data, Mapping):
        sample_id = data.get("sample_id", path.stem)
        return [parse_conversation(data, str(sample_id))]
    raise ValueError(
        f"{path}: top level must be a list or an object, got {type(data).__name__}"
    )


def load_locomo(path: str | Path) -> list[Conversation]:
    """Loads LoCoMo from ``locomo10.json`` or from a folder of per-conversation files.

    Args:
      path: a JSON file, or a folder whose ``*.json`` files are each one
        conversation or a ``locomo10.json``-style list (read in name order).

    Returns:
      The conversations in file order.

    Raises:
      ValueError: the path does not exist, a folder holds no JSON, or a file
        is not LoCoMo.
    """
    path = Path(path)
    if path.is_file():
        return load_file(path)
    if not path.is_dir():
        raise ValueError(f"LoCoMo path does not exist: {str(path)!r}")
    files = sorted(path.glob("*.json"), key=lambda file: _natural_key(file.stem))
    if not files:
        raise ValueError(f"LoCoMo folder {str(path)!r} holds no *.json file")
    return [conversation for file in files for conversation in load_file(file)]


def _natural_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def fault_counts(conversations: Iterable[Conversation]) -> dict[str, dict[str, int]]:
    """``{sample_id: {kind: count}}`` over all kinds (zeros included)."""
    counts: dict[str, dict[str, int]] = {}
    for conversation in conversations:
        per_kind = dict.fromkeys(FAULT_KINDS, 0)
        for fault in conversation.faults:
            per_kind[fault.kind] = per_kind.get(fault.kind, 0) + 1
        counts[conversation.sample_id] = per_kind
    return counts


__all__ = [
    *_records.__all__,
    "canonical_dia_id",
    "fault_counts",
    "flatten_sample",
    "load_file",
    "load_locomo",
    "parse_conversation",
    "split_dia_ids",
]
