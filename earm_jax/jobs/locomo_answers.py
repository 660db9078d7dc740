"""Answer accuracy of ``earm locomo --answer``: each policy's top-K context
given to an answering model, its answer graded by a judge model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from earm_jax.eval import stats
from earm_jax.locomo.evaluate import LocomoRunSettings, policy_contexts

if TYPE_CHECKING:
    from earm_jax.jobs.locomo import LocomoJob


def answer_accuracy(job: LocomoJob, streams, run: LocomoRunSettings, seed: int) -> dict:
    """Answer accuracy per policy from each policy's top-K context (K = ks[0])."""
    from earm_jax.scoring.answer import (
        AnswerClientConfig,
        ChatEndpoint,
        answer_and_judge,
    )

    answerer = ChatEndpoint(base_url=job.answer_base_url, model=job.answer_model)
    judge = ChatEndpoint(
        base_url=job.judge_base_url or job.answer_base_url,
        model=job.judge_model or job.answer_model,
    )
    config = AnswerClientConfig(answerer=answerer, judge=judge)
    contexts = policy_contexts(streams, run, seed, job.ks[0])
    questions = [q for s in streams for q in s.meta.memory_set.queries]
    texts = [s.meta.memory_texts for s in streams]
    owner = [i for i, s in enumerate(streams) for _ in s.meta.memory_set.queries]
    limit = (
        len(questions)
        if job.answer_limit <= 0
        else min(job.answer_limit, len(questions))
    )
    correct: dict[str, np.ndarray] = {}
    graded: dict[str, np.ndarray] = {}
    reasons: dict[str, dict[str, int]] = {}
    for policy, rows in contexts.items():
        results = []
        for index in range(limit):
            memories = [texts[owner[index]][m] for m in rows[index] if m >= 0]
            results.append(
                answer_and_judge(
                    config, questions[index].question, memories, questions[index].answer
                )
            )
        correct[policy] = np.array([r.verdict == "correct" for r in results], float)
        graded[policy] = np.array([r.verdict != "failed" for r in results])
        reasons[policy] = {}
        for r in results:
            if r.verdict == "failed":
                reasons[policy][r.reason] = reasons[policy].get(r.reason, 0) + 1
    by_policy: dict[str, Any] = {}
    for policy, values in correct.items():
        row: dict[str, Any] = {
            "graded": int(graded[policy].sum()),
            "failed": int((~graded[policy]).sum()),
            "failures_by_reason": reasons[policy],
        }
        if graded[policy].any():
            ci = stats.mean_ci(
                values, where=graded[policy], num_resamples=job.num_resamples
            )
            row.update(accuracy=ci.estimate, ci=[ci.low, ci.high])
        by_policy[policy] = row
    contrasts = {}
    for baseline in ("semantic", "observed", "top_similarity", "full"):
        both = graded["mixed"] & graded[baseline]
        if both.any():
            ci = stats.contrast_ci(
                correct["mixed"],
                correct[baseline],
                where=both,
                num_resamples=job.num_resamples,
            )
            contrasts[f"mixed-{baseline}"] = {
                "mean": ci.estimate,
                "ci": [ci.low, ci.high],
                "questions": int(both.sum()),
            }
    return {
        "k": job.ks[0],
        "questions": limit,
        "answerer": job.answer_model,
        "judge": job.judge_model or job.answer_model,
        "by_policy": by_policy,
        "contrasts": contrasts,
        "note": "failed answers or judgements (service faults, unparsable "
        "verdicts) are excluded from accuracy and counted by reason, never "
        "graded; contrasts use the questions graded under both policies",
    }


__all__ = ["answer_accuracy"]
