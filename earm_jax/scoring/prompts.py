"""Versioned prompt templates for LLM relevance scoring and answering.

Every template puts the fixed instruction and the query first and the memory
last, so the anchors of one query share a prompt prefix (vLLM's prefix cache
then computes that prefix once). A template change must bump its version: the
version is part of every cache key, so old scores are never mixed with new ones.
"""

from __future__ import annotations

import math
import re

YESNO_PROMPT_VERSION = "yesno-v1"
CHAT_PROMPT_VERSION = "chat-v1"
TEXT_PROMPT_VERSION = "text-v1"
RERANK_PROMPT_VERSION = "rerank-v1"

RELEVANCE_INSTRUCTION = (
    "You judge whether a memory contains evidence that helps answer a question."
)

_YESNO_TEMPLATE = (
    "{instruction} Answer yes or no.\n"
    "Question: {query}\n"
    "Memory: {memory}\n"
    "Does the memory contain evidence for the question? Answer:"
)

_CHAT_SYSTEM = RELEVANCE_INSTRUCTION + " Reply with exactly one word: yes or no."
_CHAT_USER_TEMPLATE = (
    "Question: {query}\nMemory: {memory}\n"
    "Does the memory contain evidence for the question?"
)

# The paper's prompt: ask for a relevance number in [0, 1] as text.
_TEXT_TEMPLATE = (
    "{instruction} Rate how relevant the memory is to the question with a single "
    "number between 0 and 1 (0 = irrelevant, 1 = contains the answer). "
    "Return only the number.\n"
    "Question: {query}\n"
    "Memory: {memory}\n"
    "Relevance:"
)

# A cross-encoder scores (query, memory) directly; an instruction can be prefixed
# to the query for instruction-tuned rerankers (empty by default).
_RERANK_QUERY_TEMPLATE = "{query}"


def yesno_prompt(query: str, memory: str) -> str:
    """Completion prompt whose next token is judged as " yes" vs " no"."""
    return _YESNO_TEMPLATE.format(
        instruction=RELEVANCE_INSTRUCTION, query=query, memory=memory
    )


def chat_messages(query: str, memory: str) -> list[dict[str, str]]:
    """Chat messages (system instruction, then query, then memory)."""
    return [
        {"role": "system", "content": _CHAT_SYSTEM},
        {
            "role": "user",
            "content": _CHAT_USER_TEMPLATE.format(query=query, memory=memory),
        },
    ]


def text_prompt(query: str, memory: str) -> str:
    """The paper-style prompt asking for a number in [0, 1]."""
    return _TEXT_TEMPLATE.format(
        instruction=RELEVANCE_INSTRUCTION, query=query, memory=memory
    )


def rerank_query(query: str) -> str:
    """The query text sent to a cross-encoder / reranker endpoint."""
    return _RERANK_QUERY_TEMPLATE.format(query=query)


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def parse_text_score(text: str) -> float:
    """Parses the first number of a text reply as a score in [0, 1].

    Args:
      text: the model's completion.

    Returns:
      The score.

    Raises:
      ValueError: when the reply holds no number, or the first number is not
        finite or lies outside [0, 1]. Callers count this as a failed pair; it
        is never replaced by a default score.
    """
    match = _NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in reply {text[:40]!r}")
    value = float(match.group(0))
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"number {match.group(0)!r} outside [0, 1]")
    return value


__all__ = [
    "CHAT_PROMPT_VERSION",
    "RELEVANCE_INSTRUCTION",
    "RERANK_PROMPT_VERSION",
    "TEXT_PROMPT_VERSION",
    "YESNO_PROMPT_VERSION",
    "chat_messages",
    "parse_text_score",
    "rerank_query",
    "text_prompt",
    "yesno_prompt",
]
