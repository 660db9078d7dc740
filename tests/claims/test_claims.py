"""The claims tier (``pytest -m claims``): rerun the command behind each
headline claim of the docs and check what the docs say of it.

Each claim names a committed result JSON. Its recorded command is rerun
whole, at the committed size, into a temporary file, with XLA's
optimizations on as a user runs it. Two things are asserted of the rerun:

- **agreement**: each policy's headline metric within ``TOLERANCE`` of the
  committed JSON (the failure names the JSON, the policy and both numbers), so
  a change to the code behind a claim cannot leave the suite green;
- **orderings**: each ordering the docs state, read from the rerun's own
  paired 95% CI over questions (or streams), which must exclude 0 on the
  stated side. Orderings whose committed CI crosses 0 are not claimed here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import pytest

from earm_jax.jobs.rerun import rerun_json
from earm_jax.jobs.results_tables import provenance

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 0.002
# The ALS-vs-incremental rerun depends on the machine: incremental − ALS
# Recall@10 was committed at −0.0016 from one build of the 2-core EPYC virtual
# machine and reran within 0.002 there; on a later build it is −0.0040, and
# −0.0025 with torch held to its AVX2 kernels (that build repeats its numbers
# bit for bit; docs/performance.md). The last bits of MiniLM's embeddings
# reorder near-ties in the pools, so that rerun is held to the largest
# measured drift, 0.0024, rounded up.
SOLVER_COMPARISON_TOLERANCE = 0.003

pytestmark = [pytest.mark.claims, pytest.mark.slow]


class Claim(NamedTuple):
    """A committed result JSON, its headline metric and the orderings the
    docs state for it, as (higher policy, lower policy)."""

    source: str
    metric: str
    orderings: tuple[tuple[str, str], ...]
    ordering_metric: str = ""

    @property
    def compared_metric(self) -> str:
        return self.ordering_metric or self.metric


CLAIMS = {
    # README headline: LoCoMo turns, evidence stand-in at noise 0.1.
    "locomo-headline": Claim(
        "benchmarks/results/conversations_best_turns_noise01.json",
        "recall@10",
        (
            ("full", "best"),
            ("best", "top_similarity"),
            ("top_similarity", "mixed"),
            ("mixed", "semantic"),
        ),
    ),
    # The simulator's default run: completion beats observed + backfill.
    "simulate-default": Claim(
        "benchmarks/results/simulate_default.json",
        "hit@10",
        (("mixed", "observed_backfill"), ("mixed", "semantic")),
    ),
    # The trained cross-encoder's recorded answers (7 conversations, each
    # answered by the fold that never saw it), 25% of the calls: `best` (its
    # defaults: paying where the texts point, every question spending its
    # allowance) and learned calls beat Top-similarity; Top-similarity beats
    # Semantic; fused Mixed beats the paper's Mixed and Semantic at Mixed's
    # own calls.
    "best-trained-scorer": Claim(
        "experiments/results/best_recorded_cap025.json",
        "recall@10",
        (
            ("best", "top_similarity"),
            ("learned_calls", "top_similarity"),
            ("top_similarity", "semantic"),
            ("mixed_fused", "mixed"),
            ("mixed_fused", "semantic"),
        ),
    ),
    # The same at 25% of the calls with the blend that weighs word coverage
    # (the bfloat16 build's network, its blends fitted again on each fold's
    # held-back questions): `best` and learned calls still beat Top-similarity,
    # by more (docs/when-earm-pays.md, "With word coverage in the blend").
    "best-trained-scorer-coverage": Claim(
        "experiments/results/best_recorded_coverage_cap025.json",
        "recall@10",
        (
            ("best", "top_similarity"),
            ("learned_calls", "top_similarity"),
            ("top_similarity", "semantic"),
            ("mixed_fused", "mixed"),
        ),
    ),
    # Side information with planted features: mixed_side over Bias-only.
    "side-information-simulate": Claim(
        "experiments/results/side_information_simulate.json",
        "recall@10",
        (("mixed_side", "bias_only"), ("best", "semantic")),
    ),
}


def _rerun_env() -> dict[str, str]:
    """The test run's environment, with XLA's optimizations back on: the
    committed numbers were made the way users run."""
    env = dict(os.environ)
    env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    return env


def _rerun(source: str, tmp_path: Path, cache: Path, data: Path) -> tuple[dict, dict]:
    committed = json.loads((REPO / source).read_text(encoding="utf-8"))
    env = _rerun_env()
    env["EARM_CACHE_DIR"] = str(cache)
    fresh = rerun_json(
        provenance(committed).command,
        tmp_path,
        root=REPO,
        env=env,
        replace={"--data": str(data)},
    )
    return committed, fresh


def _contrast(payload: dict, higher: str, lower: str, metric: str) -> list[float]:
    """The paired CI of ``higher`` − ``lower`` (from either contrast's sign)."""
    contrasts = payload["contrasts"]
    if f"{higher}-{lower}" in contrasts:
        return list(contrasts[f"{higher}-{lower}"][metric]["ci"])
    if f"{lower}-{higher}" in contrasts:
        low, high = contrasts[f"{lower}-{higher}"][metric]["ci"]
        return [-high, -low]
    pytest.fail(f"no contrast {higher}-{lower} in the rerun JSON")


def disagreements(claim: Claim, committed: dict, fresh: dict) -> list[str]:
    lines = []
    for policy, result in committed["results"].items():
        before = result[claim.metric]["mean"]
        after = fresh["results"].get(policy, {}).get(claim.metric, {}).get("mean")
        if after is None or abs(after - before) > TOLERANCE:
            lines.append(
                f"{claim.source}: {policy} {claim.metric} committed {before:.4f}, "
                f"rerun {after}"
            )
    return lines


def broken_orderings(claim: Claim, fresh: dict) -> list[str]:
    lines = []
    metric = claim.compared_metric
    for higher, lower in claim.orderings:
        if higher == "full" or lower == "full":
            # Full has no paired contrast with every policy: its lead must be
            # at least ten times the agreement tolerance.
            gap = (
                fresh["results"][higher][metric]["mean"]
                - fresh["results"][lower][metric]["mean"]
            )
            if gap < 10 * TOLERANCE:
                lines.append(f"{claim.source}: {higher} − {lower} {metric} {gap:+.4f}")
            continue
        low, high = _contrast(fresh, higher, lower, metric)
        if low <= 0.0:
            lines.append(
                f"{claim.source}: {higher} > {lower} in {metric} no longer holds: "
                f"95% CI [{low:+.4f}, {high:+.4f}]"
            )
    return lines


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_claim_reruns_and_holds(name, tmp_path, embedding_cache_dir, locomo_path):
    claim = CLAIMS[name]
    committed, fresh = _rerun(claim.source, tmp_path, embedding_cache_dir, locomo_path)
    problems = disagreements(claim, committed, fresh) + broken_orderings(claim, fresh)
    assert not problems, f"claim {name!r}:\n" + "\n".join(problems)


def test_the_incremental_solver_stays_within_a_hundredth_of_als(
    tmp_path, embedding_cache_dir, locomo_path
):
    """docs/performance.md: the incremental solver's Recall@10 on LoCoMo is
    within 0.01 of ALS's (paired CI over questions inside ±0.01), and the
    rerun's difference is the committed one within the drift between
    machines (``SOLVER_COMPARISON_TOLERANCE``)."""
    source = "benchmarks/results/quality_incremental_conversations_divide.json"
    committed, fresh = _rerun(source, tmp_path, embedding_cache_dir, locomo_path)
    problems = []
    for metric in ("recall@10", "ndcg@10", "mrr"):
        before = committed["mixed"][metric]["incremental-als"]["mean"]
        after = fresh["mixed"][metric]["incremental-als"]
        if abs(after["mean"] - before) > SOLVER_COMPARISON_TOLERANCE:
            problems.append(
                f"{source}: incremental − ALS {metric} committed {before:+.4f}, "
                f"rerun {after['mean']:+.4f}"
            )
        low, high = after["ci"]
        if not (-0.01 < low and high < 0.01):
            problems.append(
                f"{source}: incremental − ALS {metric} 95% CI [{low:+.4f}, "
                f"{high:+.4f}] leaves ±0.01"
            )
    assert not problems, "\n".join(problems)


def test_going_down_the_free_order_beats_the_similarity_order(
    tmp_path, embedding_cache_dir, locomo_path
):
    """docs/when-earm-pays.md, "Going down the free order": on turns at 10% of
    the calls (the recorded answers with the word-coverage blend), `best` and
    Top-similarity each gain from re-sorting the pools by the build's free
    order, and `best` down it beats Top-similarity down the similarity order;
    each with the paired 95% CI above 0."""
    source = "experiments/results/pool_order_turns_cap010.json"
    committed, fresh = _rerun(source, tmp_path, embedding_cache_dir, locomo_path)
    problems = []
    (before,), (after,) = committed["caps"], fresh["caps"]
    for policy, result in before["policies"].items():
        for order in ("similarity_order", "free_order"):
            was, now = result[order], after["policies"][policy][order]
            if abs(now - was) > TOLERANCE:
                problems.append(
                    f"{source}: {policy} down the {order} committed {was:.4f}, "
                    f"rerun {now:.4f}"
                )
    gains = {
        "top_similarity free − similarity order": after["policies"]["top_similarity"][
            "free_minus_similarity"
        ],
        "best free − similarity order": after["policies"]["best"][
            "free_minus_similarity"
        ],
        "best (free order) − Top-similarity": after["best_free_minus_top_similarity"],
    }
    for name, ci in gains.items():
        if ci["low"] <= 0.0:
            problems.append(
                f"{source}: {name} no longer above 0: 95% CI [{ci['low']:+.4f}, "
                f"{ci['high']:+.4f}]"
            )
    assert not problems, "\n".join(problems)


def test_the_retriever_gets_what_the_harness_measured(
    tmp_path, embedding_cache_dir, locomo_path
):
    """docs/when-earm-pays.md, "In the retriever": the agent-facing retriever
    fed the recorded answers (turns, 10% of the calls): `best` down the free
    order beats it down the similarity order (paired 95% CI above 0), and
    each is within 0.01 of what `earm locomo` measured on the same answers."""
    source = "experiments/results/retriever_recorded_turns_cap010.json"
    committed, fresh = _rerun(source, tmp_path, embedding_cache_dir, locomo_path)
    problems = []
    (before,), (after,) = committed["caps"], fresh["caps"]
    for order in ("similarity_order", "free_order"):
        was, now = before["best"][order], after["best"][order]
        if abs(now - was) > TOLERANCE:
            problems.append(
                f"{source}: best down the {order} committed {was:.4f}, rerun {now:.4f}"
            )
        measured = after["harness_best"][order]
        if abs(now - measured) > 0.01:
            problems.append(
                f"{source}: best down the {order} {now:.4f} in the retriever, "
                f"{measured:.4f} in earm locomo"
            )
    gain = after["best"]["free_minus_similarity"]
    if gain["low"] <= 0.0:
        problems.append(
            f"{source}: free − similarity order no longer above 0: 95% CI "
            f"[{gain['low']:+.4f}, {gain['high']:+.4f}]"
        )
    assert not problems, "\n".join(problems)
