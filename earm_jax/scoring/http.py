"""The one retry loop of every HTTP client here (scorer, answers, judge, server).

A request is retried within bounds (``max_retries`` after the first try) on
connection errors, 5xx and 429, with exponential backoff and full jitter, a
server's ``Retry-After`` honoured but capped. What is retried and what a
failure is called is decided by :func:`failure_from_error` and
:func:`failure_from_response`; the loop itself (:func:`retry_async`,
:func:`retry_sync`) only waits and counts, and ends with
:class:`RetriesExhausted` naming the last failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

API_KEY_ENV_VARS: tuple[str, ...] = ("EARM_SCORER_API_KEY", "OPENAI_API_KEY")
"""Environment variables tried, in order, for a bearer token."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """The outcome of one try: a ``value``, or a ``failure`` reason.

    Attributes:
      value: the result when the try succeeded.
      failure: why it failed (``"timeout"``, ``"http 503: busy"``, ...); None on
        success.
      retriable: whether another try may succeed.
      retry_after_s: the server's ``Retry-After``, if it sent one.
    """

    value: Any = None
    failure: str | None = None
    retriable: bool = False
    retry_after_s: float | None = None


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retry loop: retries after the first try, backoff base/cap."""

    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0


class RetriesExhausted(Exception):
    """The last try failed and no retry is left (or it was not retriable)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def backoff_delay(
    attempt: int,
    base_s: float,
    max_s: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based).

    Exponential with full jitter, ``uniform(0, min(max_s, base_s * 2**attempt))``;
    a server's ``Retry-After`` is honoured but capped at ``max_s``.
    """
    if retry_after_s is not None and retry_after_s >= 0:
        return min(retry_after_s, max_s)
    ceiling = min(max_s, base_s * (2.0**attempt))
    return (rng or random).uniform(0.0, ceiling)


def read_api_key(env_vars: Sequence[str]) -> str | None:
    """The first non-empty API key among ``env_vars`` (never logged)."""
    for name in env_vars:
        value = os.environ.get(name)
        if value:
            return value
    return None


def error_detail(response: httpx.Response) -> str:
    """The server's error message from a JSON error body (``""`` if none)."""
    try:
        payload = response.json()
    except ValueError:
        return ""
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("message", payload.get("detail", "")))
        if isinstance(error, dict):
            error = error.get("message", "")
        return str(error)[:200]
    return ""


def failure_from_error(error: Exception, retry_timeouts: bool = True) -> Attempt:
    """A timeout (retried only if ``retry_timeouts``, or when connecting timed
    out) or a connection error (always retried)."""
    if isinstance(error, httpx.TimeoutException):
        retriable = retry_timeouts or isinstance(error, httpx.ConnectTimeout)
        return Attempt(failure="timeout", retriable=retriable)
    if isinstance(error, httpx.TransportError):
        return Attempt(failure=f"connection: {type(error).__name__}", retriable=True)
    raise error


def failure_from_response(response: httpx.Response, detail: bool = True) -> Attempt:
    """A non-200 answer: ``"http <status>[: <server message>]"``, retried on
    429 and 5xx, with the server's ``Retry-After``."""
    status = response.status_code
    reason = f"http {status}"
    if detail:
        reason = f"{reason}: {error_detail(response)}".rstrip(": ")
    retry_after = response.headers.get("retry-after")
    try:
        retry_after_s = None if retry_after is None else float(retry_after)
    except ValueError:
        retry_after_s = None
    return Attempt(
        failure=reason,
        retriable=status == 429 or status >= 500,
        retry_after_s=retry_after_s,
    )


def _next_delay(
    outcome: Attempt, attempt: int, policy: RetryPolicy, rng: random.Random | None
) -> float:
    """The wait before the next try; raises when the loop must end."""
    if not outcome.retriable or attempt >= policy.max_retries:
        raise RetriesExhausted(outcome.failure or "failed")
    return backoff_delay(
        attempt, policy.backoff_base_s, policy.backoff_max_s, outcome.retry_after_s, rng
    )


async def retry_async(
    attempt_fn: Callable[[], Awaitable[Attempt]],
    policy: RetryPolicy,
    rng: random.Random | None = None,
    on_retry: Callable[[], None] | None = None,
) -> Any:
    """Awaits ``attempt_fn`` until it succeeds or :class:`RetriesExhausted`."""
    attempt = 0
    while (outcome := await attempt_fn()).failure is not None:
        await asyncio.sleep(_next_delay(outcome, attempt, policy, rng))
        attempt += 1
        if on_retry is not None:
            on_retry()
    return outcome.value


def retry_sync(
    attempt_fn: Callable[[], Attempt],
    policy: RetryPolicy,
    rng: random.Random | None = None,
    on_retry: Callable[[], None] | None = None,
) -> Any:
    """:func:`retry_async` for blocking clients."""
    attempt = 0
    while (outcome := attempt_fn()).failure is not None:
        time.sleep(_next_delay(outcome, attempt, policy, rng))
        attempt += 1
        if on_retry is not None:
            on_retry()
    return outcome.value


__all__ = [
    "API_KEY_ENV_VARS",
    "Attempt",
    "RetriesExhausted",
    "RetryPolicy",
    "backoff_delay",
    "error_detail",
    "failure_from_error",
    "failure_from_response",
    "read_api_key",
    "retry_async",
    "retry_sync",
]
