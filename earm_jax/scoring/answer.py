"""Answer generation from a top-K context and grading by an LLM judge.

Both steps use an OpenAI-compatible ``/v1/chat/completions`` endpoint (a local
vLLM server, or any other): the answerer reads the question and the selected
memories (in chronological order, as the retriever hands them over), the judge
compares the answer with the gold answer and replies CORRECT or WRONG. The
prompts are versioned; the result records the versions. A request or parse
failure gives ``verdict="failed"`` with the reason, never a guessed verdict.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Literal

import httpx

from earm_jax.scoring import http as retry
from earm_jax.scoring.http import API_KEY_ENV_VARS, Attempt

ANSWER_PROMPT_VERSION = "answer-v1"
JUDGE_PROMPT_VERSION = "judge-v1"

Verdict = Literal["correct", "incorrect", "failed"]

_ANSWER_SYSTEM = (
    "You answer questions about a long conversation using only the memories "
    "given. Answer briefly (a few words). If the memories do not contain the "
    "answer, give your best short guess."
)
_ANSWER_USER = "Memories:\n{context}\n\nQuestion: {question}\nAnswer:"
_JUDGE_SYSTEM = (
    "You grade answers. Given a question, a gold answer and a generated answer, "
    "reply CORRECT if the generated answer means the same as the gold answer "
    "(be generous with wording, dates in other formats and extra detail), "
    "otherwise WRONG. Reply with one word: CORRECT or WRONG."
)
_JUDGE_USER = (
    "Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}\nGrade:"
)
_VERDICT = re.compile(r"\b(CORRECT|WRONG)\b", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class ChatEndpoint:
    """An OpenAI-compatible chat endpoint.

    Attributes:
      base_url: server root (``/v1`` suffix accepted).
      model: served model name.
      api_key_env: environment variables tried for a bearer token (never logged).
      timeout_s: per-request time limit.
      max_retries: retries on connection errors, 5xx and 429.
      max_tokens: completion length limit.
    """

    base_url: str
    model: str
    api_key_env: tuple[str, ...] = API_KEY_ENV_VARS
    timeout_s: float = 60.0
    max_retries: int = 2
    max_tokens: int = 64

    @property
    def root_url(self) -> str:
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclasses.dataclass(frozen=True)
class AnswerClientConfig:
    """The answering endpoint and the judge endpoint (may be the same)."""

    answerer: ChatEndpoint
    judge: ChatEndpoint | None = None

    @property
    def judge_endpoint(self) -> ChatEndpoint:
        return self.judge or dataclasses.replace(self.answerer, max_tokens=8)


@dataclasses.dataclass(frozen=True)
class AnswerResult:
    """One question's outcome.

    Attributes:
      verdict: ``correct`` / ``incorrect`` / ``failed``.
      answer: the generated answer ("" when generation failed).
      judge_reply: the judge's raw reply.
      reason: why it failed ("" otherwise).
      answer_prompt_version: version of the answer prompt.
      judge_prompt_version: version of the judge prompt.
    """

    verdict: Verdict
    answer: str = ""
    judge_reply: str = ""
    reason: str = ""
    answer_prompt_version: str = ANSWER_PROMPT_VERSION
    judge_prompt_version: str = JUDGE_PROMPT_VERSION


class ChatRequestError(RuntimeError):
    """A chat request failed for good (after bounded retries)."""


def answer_messages(
    question: str, context_memories: Sequence[str]
) -> list[dict[str, str]]:
    """The answer prompt: memories one per line, then the question."""
    context = "\n".join(f"- {memory}" for memory in context_memories) or "(none)"
    return [
        {"role": "system", "content": _ANSWER_SYSTEM},
        {
            "role": "user",
            "content": _ANSWER_USER.format(context=context, question=question),
        },
    ]


def judge_messages(
    question: str, gold_answer: str, answer: str
) -> list[dict[str, str]]:
    """The judge prompt."""
    return [
        {"role": "system", "content": _JUDGE_SYSTEM},
        {
            "role": "user",
            "content": _JUDGE_USER.format(
                question=question, gold=gold_answer, answer=answer
            ),
        },
    ]


def parse_verdict(reply: str) -> Literal["correct", "incorrect"]:
    """CORRECT / WRONG from the judge's reply (first occurrence wins).

    Raises:
      ValueError: the reply holds neither word.
    """
    match = _VERDICT.search(reply)
    if match is None:
        raise ValueError(f"judge reply without CORRECT/WRONG: {reply[:60]!r}")
    return "correct" if match.group(1).upper() == "CORRECT" else "incorrect"


def chat_completion(
    endpoint: ChatEndpoint,
    messages: list[dict[str, str]],
    client: httpx.Client | None = None,
) -> str:
    """One chat completion's text (temperature 0), with bounded retries.

    Raises:
      ChatRequestError: on a timeout, a non-retriable HTTP error, exhausted
        retries or a malformed reply.
    """
    headers = {"Content-Type": "application/json"}
    api_key = retry.read_api_key(endpoint.api_key_env)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = {
        "model": endpoint.model,
        "messages": messages,
        "max_tokens": endpoint.max_tokens,
        "temperature": 0.0,
    }
    owned = client is None
    http = client or httpx.Client(timeout=endpoint.timeout_s)

    def attempt() -> Attempt:
        try:
            response = http.post(
                endpoint.root_url + "/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=endpoint.timeout_s,
            )
        except (httpx.TimeoutException, httpx.TransportError) as error:
            # A timed-out chat is not retried: the server is slow, not down.
            return retry.failure_from_error(error, retry_timeouts=False)
        if response.status_code != 200:
            return retry.failure_from_response(response, detail=False)
        try:
            return Attempt(str(response.json()["choices"][0]["message"]["content"]))
        except (ValueError, KeyError, IndexError, TypeError):
            return Attempt(failure="bad response")

    try:
        return retry.retry_sync(
            attempt, retry.RetryPolicy(endpoint.max_retries, 0.5, 8.0)
        )
    except retry.RetriesExhausted as error:
        raise ChatRequestError(error.reason) from None
    finally:
        if owned:
            http.close()


def answer_and_judge(
    client_cfg: AnswerClientConfig,
    question: str,
    context_memories: Sequence[str],
    gold_answer: str,
    client: httpx.Client | None = None,
) -> AnswerResult:
    """Generates an answer from the context and grades it against the gold answer.

    Args:
      client_cfg: answer and judge endpoints.
      question: the question.
      context_memories: the top-K memories, in the order they should be shown.
      gold_answer: the reference answer.
      client: an ``httpx.Client`` to reuse connections (optional).

    Returns:
      The verdict with the answer, the judge's reply and, when failed, why.
    """
    try:
        answer = chat_completion(
            client_cfg.answerer, answer_messages(question, context_memories), client
        ).strip()
    except ChatRequestError as error:
        return AnswerResult(verdict="failed", reason=f"answer: {error}")
    try:
        reply = chat_completion(
            client_cfg.judge_endpoint,
            judge_messages(question, gold_answer, answer),
            client,
        )
    except ChatRequestError as error:
        return AnswerResult(verdict="failed", answer=answer, reason=f"judge: {error}")
    try:
        verdict = parse_verdict(reply)
    except ValueError as error:
        return AnswerResult(
            verdict="failed", answer=answer, judge_reply=reply, reason=f"parse: {error}"
        )
    return AnswerResult(verdict=verdict, answer=answer, judge_reply=reply)


def accuracy_with_ci(
    verdicts: Sequence[Verdict],
    num_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float | int]:
    """Answer accuracy over graded questions with a bootstrap confidence interval.

    Failed questions are excluded from the accuracy and counted separately (they
    are not scored as wrong). The interval is :func:`earm_jax.eval.stats.mean_ci`;
    for paired comparisons between policies use :func:`earm_jax.eval.stats.contrast_ci`
    over the same questions.

    Returns:
      ``{"accuracy", "low", "high", "graded", "failed"}`` (NaN when none graded).
    """
    import numpy as np

    from earm_jax.eval import stats

    graded = np.array([v == "correct" for v in verdicts if v != "failed"], float)
    failed = sum(v == "failed" for v in verdicts)
    if graded.size == 0:
        nan = float("nan")
        return {"accuracy": nan, "low": nan, "high": nan, "graded": 0, "failed": failed}
    ci = stats.mean_ci(
        graded, confidence=confidence, num_resamples=num_bootstrap, seed=seed
    )
    return {
        "accuracy": ci.estimate,
        "low": ci.low,
        "high": ci.high,
        "graded": int(graded.size),
        "failed": int(failed),
    }


__all__ = [
    "ANSWER_PROMPT_VERSION",
    "JUDGE_PROMPT_VERSION",
    "AnswerClientConfig",
    "AnswerResult",
    "ChatEndpoint",
    "ChatRequestError",
    "accuracy_with_ci",
    "answer_and_judge",
    "answer_messages",
    "chat_completion",
    "judge_messages",
    "parse_verdict",
]
