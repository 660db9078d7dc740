"""LoCoMo loading (both file forms), fault repair and the two memory settings."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from locomo_facts import QUERY_COUNTS

from earm_jax.locomo import data
from earm_jax.locomo.data import (
    FAULT_KINDS,
    Conversation,
    canonical_dia_id,
    fault_counts,
    load_locomo,
    parse_conversation,
)
from earm_jax.locomo.memories import build_memories, insertion_times, turn_text

# Faults measured on the shared files; kinds not listed are zero.
EXPECTED_FAULTS = {
    "26": {"malformed_evidence_id": 1, "empty_evidence": 2, "date_without_session": 16},
    "30": {"multi_id_observation": 1},
    "41": {},
    "42": {"malformed_evidence_id": 1, "dangling_evidence_id": 1},
    "43": {"malformed_evidence_id": 1, "multi_id_observation": 2},
    "48": {"multi_id_observation": 4, "duplicate_question": 11},
    "50": {
        "malformed_evidence_id": 1,
        "duplicate_evidence_id": 1,
        "empty_evidence": 2,
        "multi_id_observation": 1,
    },
}


@pytest.fixture(scope="module")
def by_id(conversations: list[Conversation]) -> dict[str, Conversation]:
    return {conversation.sample_id: conversation for conversation in conversations}


def question(conversation: Conversation, index: int) -> data.Question:
    return next(q for q in conversation.qa if q.index == index)


# -- real data ---------------------------------------------------------------


@pytest.mark.locomo
def test_per_conversation_files_load_with_the_documented_query_counts(
    conversations: list[Conversation],
) -> None:
    counts = {c.sample_id: len(c.queries()) for c in conversations}
    assert counts == QUERY_COUNTS
    for conversation in conversations:
        assert conversation.speakers[0] and conversation.speakers[1]
        assert all(session.date_time for session in conversation.sessions)
        numbers = [session.number for session in conversation.sessions]
        assert numbers == sorted(numbers)
        for turn in conversation.turns:
            assert re.fullmatch(rf"D{turn.session}:\d+", turn.dia_id)


@pytest.mark.locomo
def test_every_fault_on_the_real_data_is_counted(
    conversations: list[Conversation],
) -> None:
    counts = fault_counts(conversations)
    for sample_id, expected in EXPECTED_FAULTS.items():
        nonzero = {kind: n for kind, n in counts[sample_id].items() if n}
        assert nonzero == expected, sample_id
    for conversation in conversations:
        for fault in conversation.faults:
            assert fault.conversation == conversation.sample_id
            assert fault.kind in FAULT_KINDS
            assert fault.detail and fault.action


@pytest.mark.locomo
def test_real_faults_are_repaired_where_the_intent_is_clear(
    by_id: dict[str, Conversation],
) -> None:
    # "D8:6; D9:17": two ids in one string.
    assert question(by_id["26"], 37).evidence == ("D8:6", "D9:17")
    # "D:11:26" -> D11:26; "D30:05" -> D30:5.
    assert "D11:26" in question(by_id["43"], 18).evidence
    assert question(by_id["50"], 69).evidence == ("D30:5",)
    # "D" is dropped; the dangling D10:19 (session 10 ends at D10:16) too.
    assert question(by_id["42"], 88).evidence == ("D1:18", "D1:20")
    assert "D10:19" not in question(by_id["42"], 58).evidence
    assert len(question(by_id["42"], 58).evidence) == 6
    # Duplicated D4:5 kept once; empty evidence kept as an unlabelled query.
    assert question(by_id["50"], 5).evidence.count("D4:5") == 1
    assert question(by_id["26"], 30).evidence == ()
    # Observations naming several turns keep all of them.
    multi = [o for o in by_id["48"].observations if len(o.dia_ids) > 1]
    assert {o.dia_ids for o in multi} >= {("D22:21", "D22:23"), ("D4:16", "D4:40")}
    # Every kept evidence id names an existing turn.
    for conversation in by_id.values():
        ids = {turn.dia_id for turn in conversation.turns}
        for q in conversation.qa:
            assert set(q.evidence) <= ids
            assert len(set(q.evidence)) == len(q.evidence)


@pytest.mark.locomo
def test_adversarial_questions_are_loaded_but_not_queries(
    by_id: dict[str, Conversation],
) -> None:
    conversation = by_id["26"]
    adversarial = [q for q in conversation.qa if q.category == 5]
    assert len(adversarial) == 47
    assert all(q.adversarial_answer for q in adversarial)
    assert sum(q.answer is None for q in adversarial) == 45  # two carry both
    assert all(q.category in (1, 2, 3, 4) for q in conversation.queries())
    indexes = [q.index for q in conversation.queries()]
    assert indexes == sorted(indexes)  # file order
    assert question(conversation, 1).answer == "2022"  # an int in the file


def to_single_file_sample(sample_id: str, flat: dict) -> dict:
    """A per-conversation dict in ``locomo10.json``'s documented sample schema."""
    conversation = {
        key: value
        for key, value in flat.items()
        if key in ("speaker_a", "speaker_b")
        or re.fullmatch(r"session_\d+(_date_time)?", key)
    }
    return {
        "sample_id": sample_id,
        "conversation": conversation,
        "qa": flat["qa"],
        "observation": {
            k: v for k, v in flat.items() if re.fullmatch(r"session_\d+_observation", k)
        },
        "session_summary": {
            k: v for k, v in flat.items() if re.fullmatch(r"session_\d+_summary", k)
        },
        "event_summary": {
            k: v for k, v in flat.items() if re.fullmatch(r"events_session_\d+", k)
        },
    }


def relabel(conversation: Conversation, sample_id: str) -> Conversation:
    faults = tuple(
        dataclasses.replace(fault, conversation=sample_id)
        for fault in conversation.faults
    )
    return dataclasses.replace(conversation, sample_id=sample_id, faults=faults)


@pytest.mark.locomo
def test_single_file_form_agrees_with_per_conversation_files(
    conversations: list[Conversation], tmp_path: Path, locomo_path: Path
) -> None:
    folder = locomo_path
    samples = [
        to_single_file_sample(
            f"conv-{c.sample_id}",
            json.loads((folder / f"{c.sample_id}.json").read_text(encoding="utf-8")),
        )
        for c in conversations
    ]
    single_file = tmp_path / "locomo10.json"
    single_file.write_text(json.dumps(samples), encoding="utf-8")
    from_single_file = load_locomo(single_file)
    assert [c.sample_id for c in from_single_file] == [s["sample_id"] for s in samples]
    for ours, theirs in zip(conversations, from_single_file, strict=True):
        assert relabel(theirs, ours.sample_id) == ours
    # A folder holding locomo10.json reads the same way.
    assert load_locomo(tmp_path) == from_single_file


# -- synthetic faults --------------------------------------------------------


def faulty_conversation() -> dict:
    """A small per-conversation dict with every fault kind at least once."""
    return {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:00 pm on 1 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
            {
                "speaker": "Bob",
                "dia_id": "D1:2",
                "text": "Look!",
                "blip_caption": "a photo of a dog",
            },
            {"speaker": "Ann", "dia_id": "D1:2", "text": "duplicate id"},
            {"speaker": "Ann", "text": "no id"},
            "not a turn",
            {"speaker": "Bob", "dia_id": "D1:03", "text": "Zero-padded id."},
        ],
        "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "No date here."}],
        "session_3_date_time": "2:00 pm on 3 May, 2023",
        "session_1_observation": {
            "Ann": [
                ["Ann adopted a cat.", "D1:1"],
                ["Bob has a dog.", ["D1:2", "D1:3"]],
                ["Two ids in a string.", "D1:1, D1:2"],
                ["Points nowhere.", "D9:9"],
                ["Bad id.", "D"],
                "not a fact",
            ]
        },
        "qa": [
            {"question": "Pet?", "answer": "cat", "evidence": ["D1:1"], "category": 1},
            {"question": "Pet?", "answer": "cat", "evidence": ["D1:1"], "category": 1},
            {
                "question": "Dog?",
                "evidence": ["D1:2; D2:1"],
                "category": 2,
                "answer": 1,
            },
            {"question": "Ids?", "evidence": ["D:1:1", "D", "D7:7"], "category": 4},
            {"question": "Dup ids?", "evidence": ["D1:1", "D1:1"], "category": 3},
            {"question": "None?", "answer": "x", "evidence": [], "category": 3},
            {"question": "Bad category", "evidence": [], "category": 9},
            {
                "question": "Trap",
                "adversarial_answer": "y",
                "evidence": [],
                "category": 5,
            },
            42,
        ],
    }


def test_every_fault_kind_is_counted_on_synthetic_data() -> None:
    conversation = parse_conversation(faulty_conversation(), "synthetic")
    counts = fault_counts([conversation])["synthetic"]
    assert counts == {
        "malformed_evidence_id": 3,  # "D1:2; D2:1", "D:1:1", "D"
        "dangling_evidence_id": 1,  # D7:7
        "duplicate_evidence_id": 1,  # D1:1 twice
        "empty_evidence": 2,  # "None?", "Trap" (category 5 counts too)
        "duplicate_question": 1,  # "Pet?" again
        "malformed_question": 2,  # category 9, and 42
        "multi_id_observation": 2,  # a list of two, a string of two
        "malformed_observation": 2,  # "D" (the fact goes too), "not a fact"
        "dangling_observation_id": 1,  # D9:9 (the fact goes too)
        "malformed_turn": 3,  # no id, not a turn, D1:03 (repaired)
        "duplicate_turn_id": 1,  # D1:2 twice
        "date_without_session": 1,  # session_3_date_time
        "session_without_date": 1,  # session_2
    }
    assert set(counts) == set(FAULT_KINDS)
    assert all(counts[kind] > 0 for kind in FAULT_KINDS)
    dropped_facts = [f for f in conversation.faults if f.action.endswith("left)")]
    assert len(dropped_facts) == 2
    turn_ids = [turn.dia_id for turn in conversation.turns]
    assert turn_ids == ["D1:1", "D1:2", "D1:3", "D2:1"]
    evidence = {q.question: q.evidence for q in conversation.qa}
    assert evidence["Dog?"] == ("D1:2", "D2:1")
    assert evidence["Ids?"] == ("D1:1",)
    assert evidence["Dup ids?"] == ("D1:1",)
    assert [o.dia_ids for o in conversation.observations] == [
        ("D1:1",),
        ("D1:2", "D1:3"),
        ("D1:1", "D1:2"),
    ]
    assert [q.question for q in conversation.queries()] == [
        "Pet?",
        "Pet?",
        "Dog?",
        "Ids?",
        "Dup ids?",
        "None?",
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("D3:7", "D3:7"),
        ("D:11:26", "D11:26"),
        ("D30:05", "D30:5"),
        (" d2 : 4 ", "D2:4"),
        ("D", None),
        ("D8:6; D9:17", None),
        ("3:7", None),
    ],
)
def test_canonical_dia_id(raw: str, expected: str | None) -> None:
    assert canonical_dia_id(raw) == expected


def test_not_locomo_input_raises_naming_the_field(tmp_path: Path) -> None:
    good = faulty_conversation()
    with pytest.raises(ValueError, match="speaker_a"):
        parse_conversation({**good, "speaker_a": None}, "x")
    with pytest.raises(ValueError, match="session_N"):
        parse_conversation({"speaker_a": "A", "speaker_b": "B", "qa": []}, "x")
    with pytest.raises(ValueError, match="'qa'"):
        parse_conversation({**good, "qa": {"not": "a list"}}, "x")
    with pytest.raises(ValueError, match="session_1"):
        parse_conversation({**good, "session_1": "text"}, "x")
    with pytest.raises(ValueError, match="does not exist"):
        load_locomo(tmp_path / "missing")
    with pytest.raises(ValueError, match="no \\*.json"):
        load_locomo(tmp_path)
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_locomo(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("3", encoding="utf-8")
    with pytest.raises(ValueError, match="top level"):
        load_locomo(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text('[{"sample_id": "a"}]', encoding="utf-8")
    with pytest.raises(ValueError, match="'conversation'"):
        load_locomo(tmp_path / "bad.json")


# -- memory settings ---------------------------------------------------------


def test_turn_memories_and_relevance_on_synthetic_data() -> None:
    conversation = parse_conversation(faulty_conversation(), "synthetic")
    turns = build_memories(conversation, "turns")
    assert [m.text for m in turns.memories] == [
        "Ann: I adopted a cat.",
        "Bob: Look! [image: a photo of a dog]",
        "Bob: Zero-padded id.",
        "Ann: No date here.",
    ]
    assert turns.memories[0].date_time == "1:00 pm on 1 May, 2023"
    assert turns.memories[0].dated_text().startswith("[1:00 pm on 1 May, 2023] Ann:")
    assert turns.relevant_rows == ((0,), (0,), (1, 3), (0,), (0,), ())
    assert turns.unlabelled == (5,)
    observations = build_memories(conversation, "observations")
    # Fact 0 names D1:1, fact 2 names D1:1 and D1:2; fact 1 names D1:2, D1:3.
    assert observations.relevant_rows[0] == (0, 2)
    assert observations.relevant_rows[2] == (1, 2)
    matrix = observations.relevance_matrix()
    assert matrix.shape == (6, 3) and matrix.dtype == bool
    assert matrix.sum() == sum(len(rows) for rows in observations.relevant_rows)
    with pytest.raises(ValueError, match="setting"):
        build_memories(conversation, "sessions")  # type: ignore[arg-type]


@pytest.mark.locomo
def test_memory_settings_on_real_data(conversations: list[Conversation]) -> None:
    unlabelled = total = 0
    for conversation in conversations:
        turns = build_memories(conversation, "turns")
        assert len(turns.memories) == len(conversation.turns)
        assert [m.row for m in turns.memories] == list(range(len(turns.memories)))
        assert turns.memories[0].text == turn_text(conversation.turns[0])
        for q, rows in zip(turns.queries, turns.relevant_rows, strict=True):
            assert {turns.memories[r].dia_ids[0] for r in rows} == set(q.evidence)
        observations = build_memories(conversation, "observations")
        assert len(observations.memories) == len(conversation.observations)
        unlabelled += len(observations.unlabelled)
        total += len(observations.queries)
        # Turns: only the questions with empty evidence are unlabelled.
        assert len(turns.unlabelled) == sum(not q.evidence for q in turns.queries)
    # docs/locomo.md: about 15% of questions have no relevant observation.
    assert 0.12 <= unlabelled / total <= 0.18


@pytest.mark.locomo
def test_insertion_rules(by_id: dict[str, Conversation]) -> None:
    memory_set = build_memories(by_id["42"], "turns")
    at_start = insertion_times(memory_set)
    assert at_start.dtype == np.int32 and not at_start.any()
    incremental = insertion_times(memory_set, "after_evidence_session")
    assert incremental.shape == (len(memory_set.memories),)
    sessions = np.array([m.session for m in memory_set.memories])
    # Later sessions never arrive earlier; every query's evidence exists in time.
    order = np.argsort(sessions, kind="stable")
    assert np.all(np.diff(incremental[order]) >= 0)
    for t, rows in enumerate(memory_set.relevant_rows):
        assert np.all(incremental[list(rows)] <= t)
    assert incremental.min() == 0 and incremental.max() <= len(memory_set.queries)
    with pytest.raises(ValueError, match="insertion rule"):
        insertion_times(memory_set, "never")  # type: ignore[arg-type]
