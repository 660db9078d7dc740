"""``--budget-scale auto``: the scale solved on the streams puts the anchored
policies' measured calls at the cap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from earm_jax.eval.budget_match import (
    anchored_share,
    match_budget_scale,
    usable_counts,
)
from earm_jax.policies.budget import PAPER_STAGE_RATIOS

RATIOS = PAPER_STAGE_RATIOS


def test_share_by_hand():
    # 20 queries, pool 10, blocks of 10: stage budgets 10 then 4 (0.4 x 10).
    usable = [np.array([3] * 10 + [10] * 10)]
    # scale 1: min(10, 3) x 10 + 4 x 10 = 70 of 130.
    assert anchored_share(1.0, usable, 10, 10, RATIOS) == pytest.approx(70 / 130)
    # scale 0.5: min(5, 3) x 10 + round(2.0) x 10 = 50 of 130.
    assert anchored_share(0.5, usable, 10, 10, RATIOS) == pytest.approx(50 / 130)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=5, max_size=80),
    st.floats(0.02, 0.95),
)
def test_the_match_is_the_nearest_step(counts, target):
    usable = [np.asarray(counts)]
    if sum(counts) == 0:
        with pytest.raises(ValueError, match="usable"):
            match_budget_scale(target, usable, 50, 10, RATIOS)
        return
    found = match_budget_scale(target, usable, 50, 10, RATIOS)
    assert found.share == anchored_share(found.scale, usable, 50, 10, RATIOS)
    # No scale on a fine grid gets nearer the target.
    grid = np.linspace(0, 3 * max(found.scale, 1.0), 400)
    best = min(abs(anchored_share(s, usable, 50, 10, RATIOS) - target) for s in grid)
    assert abs(found.share - target) <= best + 1e-12


def test_usable_counts_follow_insertion():
    candidates = np.array([[0, 1, 2], [0, 1, 2], [2, -1, 0]])
    valid = np.array([[True, True, True], [True, True, False], [True, False, True]])
    insert_time = np.array([0, 1, 2])
    np.testing.assert_array_equal(
        usable_counts(candidates, valid, insert_time), [1, 2, 2]
    )


def test_a_bad_target_is_refused():
    with pytest.raises(ValueError, match="call_budget"):
        match_budget_scale(1.5, [np.array([5])], 10, 10, RATIOS)
