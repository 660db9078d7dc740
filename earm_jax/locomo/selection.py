"""Which conversations a run reads, and how many of their questions: the
``--conversations`` and ``--limit`` options of the LoCoMo commands."""

from __future__ import annotations

import dataclasses

from earm_jax.locomo.data import QUERY_CATEGORIES, Conversation


def _matches(sample_id: str, wanted: str) -> bool:
    """``"26"`` names ``"26"`` (per-conversation files) and ``"conv-26"``."""
    return wanted in (sample_id, sample_id.removeprefix("conv-"))


def select_conversations(
    conversations: list[Conversation], wanted: tuple[str, ...] = (), limit: int = 0
) -> list[Conversation]:
    """The conversations named in ``wanted`` (all if empty), in file order, each
    cut to its first ``limit`` questions of categories 1-4 (0 = all).

    Raises:
      ValueError: a wanted id is not in the data (the message lists the ids).
    """
    known = [c.sample_id for c in conversations]
    missing = [w for w in wanted if not any(_matches(k, w) for k in known)]
    if missing:
        raise ValueError(
            f"no conversation {', '.join(missing)} in the data; it has "
            f"{', '.join(k.removeprefix('conv-') for k in known)}"
        )
    chosen = [
        c
        for c in conversations
        if not wanted or any(_matches(c.sample_id, w) for w in wanted)
    ]
    return [_first_questions(c, limit) for c in chosen] if limit else chosen


def _first_questions(conversation: Conversation, limit: int) -> Conversation:
    kept, count = [], 0
    for question in conversation.qa:
        if question.category in QUERY_CATEGORIES:
            if count == limit:
                continue
            count += 1
        kept.append(question)
    return dataclasses.replace(conversation, qa=tuple(kept))


__all__ = ["select_conversations"]
