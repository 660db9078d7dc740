"""Display names and order of policies and contrasts: the one place tables and
figures take them from.

Internal policy keys (``"observed_backfill"``) are what JSONs and code use; a
person reads the README's names in the README's order. A key not listed here
(a policy added later, e.g. ``"best"``) is shown by its key, after the known
ones, in the order the results hold it, so no table or figure needs a change to
show it.

>>> policy_label("observed_backfill")
'Observed+backfill'
>>> policy_label("best")
'best'
>>> ordered(["full", "best", "semantic", "mixed"])
['semantic', 'mixed', 'full', 'best']
>>> contrast_label("mixed-top_similarity")
'Mixed (EARM) − Top-similarity'
>>> contrast_label("best-mixed")
'best − Mixed (EARM)'
"""

from __future__ import annotations

from collections.abc import Iterable

POLICY_LABELS: dict[str, str] = {
    "semantic": "Semantic",
    "observed": "Observed-only",
    "observed_backfill": "Observed+backfill",
    "mixed": "Mixed (EARM)",
    "bias_only": "Bias-only",
    "top_similarity": "Top-similarity",
    "full": "Full",
}
"""README order (docs/policies.md): the key's position here is its position in every
table and legend."""

SHORT_LABELS: dict[str, str] = {
    "semantic": "Semantic",
    "observed": "Obs.-only",
    "observed_backfill": "Obs.+backfill",
    "mixed": "Mixed",
    "bias_only": "Bias-only",
    "top_similarity": "Top-sim.",
    "full": "Full",
}
"""Narrow names for figure annotations and tight columns."""


def policy_label(key: str, short: bool = False) -> str:
    """The display name of policy ``key`` (the key itself when unknown)."""
    return (SHORT_LABELS if short else POLICY_LABELS).get(key, key)


def policy_rank(key: str) -> int:
    """Sort key: README position, unknown policies after the known ones."""
    order = list(POLICY_LABELS)
    return order.index(key) if key in order else len(order)


def ordered(keys: Iterable[str]) -> list[str]:
    """``keys`` in README order; unknown keys keep their relative order, last."""
    keys = list(keys)
    return sorted(keys, key=lambda k: (policy_rank(k), keys.index(k)))


def split_contrast(name: str) -> tuple[str, str] | None:
    """``"a-b"`` -> ``("a", "b")`` for policy keys (keys contain no ``-``)."""
    parts = name.split("-")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def contrast_label(name: str, short: bool = False) -> str:
    """``"mixed-semantic"`` -> ``"Mixed (EARM) − Semantic"``."""
    pair = split_contrast(name)
    if pair is None:
        return name
    return f"{policy_label(pair[0], short)} − {policy_label(pair[1], short)}"


def ordered_contrasts(names: Iterable[str]) -> list[str]:
    """Contrasts by treatment then baseline, in README order; others last."""
    names = list(names)

    def key(name: str) -> tuple[int, int, int]:
        pair = split_contrast(name)
        if pair is None:
            return (len(POLICY_LABELS) + 1, 0, names.index(name))
        return (policy_rank(pair[0]), policy_rank(pair[1]), names.index(name))

    return sorted(names, key=key)


GAIN_RECOVERY_NOTE = (
    "gain recovery = (policy − Semantic) / (Full − Semantic) on {metric}: the share "
    "of Full's gain over Semantic a policy recovers; above 1 it beats Full "
    "(possible where Full's noisy scores misorder the top, e.g. on MRR/nDCG), "
    "below 0 it is worse than Semantic"
)


def gain_recovery_note(metric: str) -> str:
    """One sentence saying what the gain-recovery column is and why it can
    exceed 1."""
    return GAIN_RECOVERY_NOTE.format(metric=metric)


__all__ = [
    "GAIN_RECOVERY_NOTE",
    "POLICY_LABELS",
    "SHORT_LABELS",
    "contrast_label",
    "gain_recovery_note",
    "ordered",
    "ordered_contrasts",
    "policy_label",
    "policy_rank",
    "split_contrast",
]
