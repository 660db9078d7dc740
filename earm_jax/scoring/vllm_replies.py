"""Reading the replies of an OpenAI-compatible server: choices in order,
yes/no log-probabilities to a score, and the failure a malformed reply is."""

from __future__ import annotations

import math
from typing import Any

from .base import PairScore


class RequestFailed(Exception):
    """A request failed for good; ``reason`` is what its pairs report."""

    def __init__(self, reason: str, reason_class: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reason_class = reason_class


def reason_class(reason: str) -> str:
    """``"http 503: busy"`` -> ``"http 503"``; ``"parse: ..."`` -> ``"parse"``."""
    return reason.split(":")[0]


def list_field(data: Any, field: str) -> list[Any]:
    if not isinstance(data, dict) or not isinstance(data.get(field), list):
        raise RequestFailed(f"bad response: no {field!r} list", "bad response")
    return data[field]


def choices_by_index(data: Any, expected: int) -> list[dict[str, Any]]:
    choices = list_field(data, "choices")
    if len(choices) != expected:
        raise RequestFailed(
            f"bad response: {len(choices)} choices for {expected} prompts",
            "bad response",
        )
    try:
        ordered = sorted(choices, key=lambda choice: int(choice.get("index", 0)))
    except (AttributeError, TypeError, ValueError) as error:
        raise RequestFailed(
            "bad response: malformed choices", "bad response"
        ) from error
    return ordered


def yes_no_from_completion(
    choice: dict[str, Any], yes_id: int, no_id: int
) -> PairScore:
    try:
        table = choice["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        return PairScore.failure("bad response: no logprobs")
    if not isinstance(table, dict):
        return PairScore.failure("bad response: no logprobs")
    return normalised_yes(
        table.get(f"token_id:{yes_id}"), table.get(f"token_id:{no_id}")
    )


def normalised_yes(yes_logprob: Any, no_logprob: Any) -> PairScore:
    """P(yes) / (P(yes) + P(no)) = sigmoid(logp_yes - logp_no), stably."""
    if yes_logprob is None and no_logprob is None:
        return PairScore.failure("bad response: neither yes nor no in logprobs")
    try:
        yes = float(yes_logprob) if yes_logprob is not None else -math.inf
        no = float(no_logprob) if no_logprob is not None else -math.inf
    except (TypeError, ValueError):
        return PairScore.failure("bad response: logprob not a number")
    if math.isnan(yes) or math.isnan(no):
        return PairScore.failure("bad response: logprob is NaN")
    if yes == no:
        return PairScore.success(0.5)
    difference = yes - no
    if difference >= 0:
        return PairScore.success(1.0 / (1.0 + math.exp(-difference)))
    exp_difference = math.exp(difference)
    return PairScore.success(exp_difference / (1.0 + exp_difference))


__all__ = [
    "RequestFailed",
    "choices_by_index",
    "list_field",
    "normalised_yes",
    "reason_class",
    "yes_no_from_completion",
]
