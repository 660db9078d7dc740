"""Pointwise relevance scoring on an OpenAI-compatible vLLM server.

Modes:
  * ``yesno`` (default): ``/v1/completions`` with ``max_tokens=1`` and the
    logprobs of the " yes" / " no" tokens (asked for explicitly with vLLM's
    ``logprob_token_ids``); score = P(yes) / (P(yes) + P(no)). The token ids are
    looked up once through ``/tokenize``.
  * ``rerank``: a reranker / cross-encoder model through ``/rerank`` (or
    ``/score``); the server's relevance score (sigmoid of the logit for a
    one-label cross-encoder).
  * ``chat``: ``/v1/chat/completions`` with logprobs, one request per pair, for
    models served only that way.
  * ``text``: the paper's "return a number in [0, 1]" prompt; replies without a
    valid number are failed pairs (counted), never replaced by a default.

All pairs of one query go out in as few requests as ``max_prompts_per_request``
allows; the requests of several queries run concurrently, at most
``max_in_flight`` at a time. Each request has a timeout; connection errors, 5xx
and 429 are retried a bounded number of times with exponential backoff. Pairs
of a request that finally fails are returned as failed with the reason.

The HTTP work runs on a private asyncio event loop in a background thread, so
``score`` / ``score_many`` are plain synchronous calls (also from notebooks).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import random
import threading
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import Future
from typing import Any, Literal, TypeVar

import httpx

from . import prompts
from .base import PairScore, ScorerIdentity
from .http import (
    API_KEY_ENV_VARS,
    Attempt,
    RetriesExhausted,
    RetryPolicy,
    failure_from_error,
    failure_from_response,
    read_api_key,
    retry_async,
)

Mode = Literal["yesno", "rerank", "chat", "text"]
MODES: tuple[str, ...] = ("yesno", "rerank", "chat", "text")

_PROMPT_VERSIONS = {
    "yesno": prompts.YESNO_PROMPT_VERSION,
    "rerank": prompts.RERANK_PROMPT_VERSION,
    "chat": prompts.CHAT_PROMPT_VERSION,
    "text": prompts.TEXT_PROMPT_VERSION,
}

_T = TypeVar("_T")


class ScorerConfigError(RuntimeError):
    """The server cannot serve this scorer (raised at set-up, not per pair).

    Examples: the server is unreachable, it is not OpenAI/vLLM-compatible, the
    model name is not served, or " yes" / " no" are not single tokens.
    """


@dataclasses.dataclass(frozen=True)
class VllmScorerConfig:
    """Settings of the vLLM scoring client.

    Attributes:
      base_url: server root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1``
        is accepted and stripped).
      model: the served model name (as listed by ``/v1/models``).
      mode: ``yesno`` | ``rerank`` | ``chat`` | ``text``.
      api_key_env: environment variables tried in order for a bearer token; the
        key is never logged or stored in the identity.
      timeout_s: per-request time limit (read/write/pool).
      connect_timeout_s: time limit to open a connection.
      max_retries: retries after the first attempt (connection errors, 5xx, 429).
      backoff_base_s: first backoff; doubles per retry, with full jitter.
      backoff_max_s: cap of one backoff (also caps a server's Retry-After).
      retry_timeouts: also retry requests that timed out (off: a hung server
        would otherwise cost (retries + 1) timeouts).
      max_prompts_per_request: pairs per HTTP request (a list of prompts).
      max_in_flight: concurrent HTTP requests.
      yes_token: the completion token for "yes" (``yesno``: leading space).
      no_token: the completion token for "no".
      chat_yes_token: the first answer token for "yes" in ``chat`` mode.
      chat_no_token: the first answer token for "no" in ``chat`` mode.
      chat_top_logprobs: top logprobs asked for in ``chat`` mode when the server
        has no ``/tokenize`` (then " yes"/" no" are matched by text).
      text_max_tokens: completion length in ``text`` mode.
      rerank_endpoint: ``rerank`` (``/rerank``) or ``score`` (``/score``).
      identity_settings: extra settings that change scores (dtype, hardware),
        recorded in the identity and so in every cache key.
    """

    base_url: str
    model: str
    mode: Mode = "yesno"
    api_key_env: tuple[str, ...] = API_KEY_ENV_VARS
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_timeouts: bool = False
    max_prompts_per_request: int = 256
    max_in_flight: int = 8
    yes_token: str = " yes"
    no_token: str = " no"
    chat_yes_token: str = "yes"
    chat_no_token: str = "no"
    chat_top_logprobs: int = 20
    text_max_tokens: int = 8
    rerank_endpoint: Literal["rerank", "score"] = "rerank"
    identity_settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.max_prompts_per_request < 1 or self.max_in_flight < 1:
            raise ValueError("max_prompts_per_request and max_in_flight must be >= 1")
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and timeout_s > 0")
        if self.rerank_endpoint not in ("rerank", "score"):
            raise ValueError("rerank_endpoint must be 'rerank' or 'score'")

    @property
    def root_url(self) -> str:
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    @property
    def prompt_version(self) -> str:
        return _PROMPT_VERSIONS[self.mode]


@dataclasses.dataclass
class ScorerCounters:
    """What the client did, for cost accounting and benchmarks.

    Attributes:
      calls: pairs submitted for scoring (the cost unit; once per pair).
      pairs_sent: pairs carried by HTTP attempts (a retried request counts again):
        what the server was asked to compute.
      requests: HTTP attempts.
      pairs_ok: pairs returned with a score.
      pairs_failed: pairs returned as failed.
      failures: failed pairs by reason class (``timeout``, ``connection``,
        ``http 503``, ``bad response``, ``parse``, ...).
      retries: retried HTTP attempts.
      parse_failures: ``text`` mode replies without a valid number.
      request_latencies_s: wall time of every HTTP attempt.
      wall_s: total time inside ``score`` / ``score_many``.
      server_wait_s: time during which at least one request was in flight.
    """

    calls: int = 0
    pairs_sent: int = 0
    requests: int = 0
    pairs_ok: int = 0
    pairs_failed: int = 0
    failures: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )
    retries: int = 0
    parse_failures: int = 0
    request_latencies_s: list[float] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    server_wait_s: float = 0.0

    @property
    def client_overhead_s(self) -> float:
        """Time in the client outside waiting for the server."""
        return max(self.wall_s - self.server_wait_s, 0.0)

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.request_latencies_s)

        def quantile(q: float) -> float | None:
            if not latencies:
                return None
            return latencies[min(int(q * len(latencies)), len(latencies) - 1)]

        return {
            "calls": self.calls,
            "pairs_sent": self.pairs_sent,
            "requests": self.requests,
            "pairs_ok": self.pairs_ok,
            "pairs_failed": self.pairs_failed,
            "failures": dict(self.failures),
            "retries": self.retries,
            "parse_failures": self.parse_failures,
            "latency_p50_s": quantile(0.5),
            "latency_p95_s": quantile(0.95),
            "wall_s": self.wall_s,
            "server_wait_s": self.server_wait_s,
            "client_overhead_s": self.client_overhead_s,
        }


class _RequestFailed(Exception):
    """A request failed for good; ``reason`` is what its pairs report."""

    def __init__(self, reason: str, reason_class: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reason_class = reason_class


class _EventLoopThread:
    """A private asyncio loop in a daemon thread, for synchronous callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="earm-scorer-loop", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Awaitable[_T]) -> _T:
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        return future.result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10.0)
        self.loop.close()


class VllmScorer:
    """Relevance scorer backed by a vLLM (OpenAI-compatible) server.

    Construction checks the server (reachable, OpenAI-compatible, serves
    ``config.model``; for ``yesno`` also vLLM's ``/tokenize`` and single-token
    " yes"/" no") and raises ``ScorerConfigError`` when it cannot work.

    Args:
      config: client settings.
      check_server: run the set-up checks now (disable only in tests).
    """

    def __init__(self, config: VllmScorerConfig, check_server: bool = True) -> None:
        self.config = config
        self.counters = ScorerCounters()
        self._yes_no_ids: tuple[int, int] | None = None
        self._chat_yes_no_ids: tuple[int, int] | None = None
        self._in_flight = 0
        self._wait_started = 0.0
        self._rng = random.Random(0)
        self._retry_policy = RetryPolicy(
            config.max_retries, config.backoff_base_s, config.backoff_max_s
        )
        self._headers = {"Content-Type": "application/json"}
        api_key = read_api_key(config.api_key_env)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._loop_thread = _EventLoopThread()
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._loop_thread.run(self._open())
        if check_server:
            try:
                self._loop_thread.run(self._check_server())
            except BaseException:
                self.close()
                raise

    # ----------------------------------------------------------------- set-up

    async def _open(self) -> None:
        limits = httpx.Limits(
            max_connections=self.config.max_in_flight,
            max_keepalive_connections=self.config.max_in_flight,
        )
        timeout = httpx.Timeout(
            self.config.timeout_s, connect=self.config.connect_timeout_s
        )
        self._client = httpx.AsyncClient(
            base_url=self.config.root_url,
            headers=self._headers,
            timeout=timeout,
            limits=limits,
        )
        self._semaphore = asyncio.Semaphore(self.config.max_in_flight)

    async def _setup_request(
        self, method: str, path: str, json_body: dict[str, Any] | None = None
    ) -> httpx.Response:
        assert self._client is not None
        url = self.config.root_url + path

        async def attempt() -> Attempt:
            try:
                return Attempt(await self._client.request(method, path, json=json_body))
            except (httpx.TransportError, httpx.TimeoutException) as error:
                return Attempt(failure=type(error).__name__, retriable=True)

        try:
            return await retry_async(attempt, self._retry_policy, self._rng)
        except RetriesExhausted as error:
            raise ScorerConfigError(
                f"cannot reach the scoring server at {url}: {error.reason}"
            ) from None

    async def _check_server(self) -> None:
        config = self.config
        response = await self._setup_request("GET", "/v1/models")
        # Status before body: a 401 has no model list, and reading it as one
        # would blame the server instead of the key.
        if response.status_code in (401, 403):
            raise ScorerConfigError(
                f"{config.root_url} refused the request as unauthorised "
                f"(HTTP {response.status_code}): check the API key in one of "
                f"{', '.join(config.api_key_env)}"
            )
        try:
            served = [entry["id"] for entry in response.json()["data"]]
        except (ValueError, KeyError, TypeError) as error:
            raise ScorerConfigError(
                f"{config.root_url} is not an OpenAI-compatible server: GET /v1/models "
                f"returned HTTP {response.status_code} without a model list"
            ) from error
        if config.model not in served:
            raise ScorerConfigError(
                f"model {config.model!r} is not served at {config.root_url}; "
                f"served: {served}"
            )
        if config.mode == "yesno":
            self._yes_no_ids = await self._single_token_ids(
                config.yes_token, config.no_token, required=True
            )
        elif config.mode == "chat":
            self._chat_yes_no_ids = await self._single_token_ids(
                config.chat_yes_token, config.chat_no_token, required=False
            )

    async def _single_token_ids(
        self, yes_text: str, no_text: str, required: bool
    ) -> tuple[int, int] | None:
        ids = []
        for text in (yes_text, no_text):
            response = await self._setup_request(
                "POST",
                "/tokenize",
                {
                    "model": self.config.model,
                    "prompt": text,
                    "add_special_tokens": False,
                },
            )
            try:
                tokens = (
                    response.json()["tokens"] if response.status_code == 200 else None
                )
            except (ValueError, KeyError, TypeError):
                tokens = None
            if tokens is None:
                if not required:
                    return None
                raise ScorerConfigError(
                    f"{self.config.root_url} is not vLLM-compatible: POST /tokenize "
                    f"returned HTTP {response.status_code} (mode 'yesno' needs vLLM's "
                    "/tokenize and logprob_token_ids; use mode 'chat' or 'text' "
                    "for other servers)"
                )
            if len(tokens) != 1:
                raise ScorerConfigError(
                    f"{text!r} is {len(tokens)} tokens for {self.config.model!r}; "
                    "the yes/no tokens must be single tokens (set yes_token/no_token)"
                )
            ids.append(int(tokens[0]))
        return ids[0], ids[1]

    # ------------------------------------------------------------- public API

    @property
    def identity(self) -> ScorerIdentity:
        config = self.config
        # Batch settings are not part of the key: float32 scores agree across
        # batch shapes within 1e-4 (tests). With bf16 on GPU, where they may not,
        # add e.g. ("dtype", "bfloat16"), ("batch", "256") to identity_settings.
        settings = dict(config.identity_settings)
        if config.mode == "yesno":
            settings["tokens"] = f"{config.yes_token!r}/{config.no_token!r}"
        elif config.mode == "chat":
            settings["tokens"] = f"{config.chat_yes_token!r}/{config.chat_no_token!r}"
        elif config.mode == "text":
            settings["max_tokens"] = str(config.text_max_tokens)
        elif config.mode == "rerank":
            settings["endpoint"] = config.rerank_endpoint
        return ScorerIdentity(
            kind=f"vllm-{config.mode}",
            model=config.model,
            prompt_version=config.prompt_version,
            settings=tuple(sorted(settings.items())),
        )

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        return self.score_many([(query, memories)])[0]

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        started = time.perf_counter()
        try:
            return self._loop_thread.run(self._score_many_async(requests))
        finally:
            self.counters.wall_s += time.perf_counter() - started

    async def _score_many_async(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        """All chunks of all queries, at most ``max_in_flight`` at a time."""
        chunks: list[tuple[int, int, str, list[str]]] = []
        results: list[list[PairScore]] = []
        for query_index, (query, memories) in enumerate(requests):
            results.append([PairScore.failure("not scored")] * len(memories))
            self.counters.calls += len(memories)
            step = (
                1 if self.config.mode == "chat" else self.config.max_prompts_per_request
            )
            for start in range(0, len(memories), step):
                chunks.append(
                    (query_index, start, query, list(memories[start : start + step]))
                )

        async def run_chunk(
            query_index: int, start: int, query: str, batch: list[str]
        ) -> None:
            scores = await self._score_chunk(query, batch)
            results[query_index][start : start + len(batch)] = scores

        await asyncio.gather(*(run_chunk(*chunk) for chunk in chunks))
        for row in results:
            for pair in row:
                if pair.ok:
                    self.counters.pairs_ok += 1
                else:
                    self.counters.pairs_failed += 1
                    self.counters.failures[_reason_class(pair.reason)] += 1
        return results

    def close(self) -> None:
        """Closes the HTTP connections and the private event loop."""
        if self._client is not None:
            client, self._client = self._client, None
            try:
                self._loop_thread.run(client.aclose())
            except RuntimeError:
                pass
        self._loop_thread.stop()

    def __enter__(self) -> VllmScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- requests

    async def _score_chunk(self, query: str, memories: list[str]) -> list[PairScore]:
        mode = self.config.mode
        try:
            if mode == "yesno":
                return await self._score_yesno(query, memories)
            if mode == "text":
                return await self._score_text(query, memories)
            if mode == "rerank":
                return await self._score_rerank(query, memories)
            return [await self._score_chat(query, memory) for memory in memories]
        except _RequestFailed as failure:
            return [PairScore.failure(failure.reason)] * len(memories)

    async def _post(self, path: str, body: dict[str, Any], num_pairs: int) -> Any:
        """POSTs with timeout, bounded retries and backoff; returns parsed JSON."""
        assert self._client is not None and self._semaphore is not None
        config = self.config

        async def attempt() -> Attempt:
            async with self._semaphore:
                self._begin_wait()
                started = time.perf_counter()
                self.counters.requests += 1
                self.counters.pairs_sent += num_pairs
                try:
                    response = await self._client.post(path, json=body)
                except (httpx.TimeoutException, httpx.TransportError) as error:
                    return failure_from_error(error, config.retry_timeouts)
                finally:
                    self.counters.request_latencies_s.append(
                        time.perf_counter() - started
                    )
                    self._end_wait()
            if response.status_code != 200:
                return failure_from_response(response)
            try:
                return Attempt(response.json())
            except ValueError:
                # A 200 that is not JSON: the server is broken, not busy.
                return Attempt(failure="bad response: not JSON")

        def count_retry() -> None:
            self.counters.retries += 1

        try:
            return await retry_async(
                attempt, self._retry_policy, self._rng, on_retry=count_retry
            )
        except RetriesExhausted as error:
            raise _RequestFailed(error.reason, _reason_class(error.reason)) from None

    def _begin_wait(self) -> None:
        if self._in_flight == 0:
            self._wait_started = time.perf_counter()
        self._in_flight += 1

    def _end_wait(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self.counters.server_wait_s += time.perf_counter() - self._wait_started

    async def _score_yesno(self, query: str, memories: list[str]) -> list[PairScore]:
        assert self._yes_no_ids is not None, "set-up did not look up the yes/no ids"
        yes_id, no_id = self._yes_no_ids
        body = {
            "model": self.config.model,
            "prompt": [prompts.yesno_prompt(query, memory) for memory in memories],
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": 1,
            "logprob_token_ids": [yes_id, no_id],
            "return_tokens_as_token_ids": True,
        }
        data = await self._post("/v1/completions", body, len(memories))
        choices = _choices_by_index(data, len(memories))
        return [_yes_no_from_completion(choice, yes_id, no_id) for choice in choices]

    async def _score_text(self, query: str, memories: list[str]) -> list[PairScore]:
        body = {
            "model": self.config.model,
            "prompt": [prompts.text_prompt(query, memory) for memory in memories],
            "max_tokens": self.config.text_max_tokens,
            "temperature": 0.0,
        }
        data = await self._post("/v1/completions", body, len(memories))
        scores = []
        for choice in _choices_by_index(data, len(memories)):
            text = choice.get("text")
            if not isinstance(text, str):
                scores.append(PairScore.failure("bad response: choice without text"))
                continue
            try:
                scores.append(PairScore.success(prompts.parse_text_score(text)))
            except ValueError as error:
                self.counters.parse_failures += 1
                scores.append(PairScore.failure(f"parse: {error}"))
        return scores

    async def _score_rerank(self, query: str, memories: list[str]) -> list[PairScore]:
        query_text = prompts.rerank_query(query)
        if self.config.rerank_endpoint == "rerank":
            body: dict[str, Any] = {
                "model": self.config.model,
                "query": query_text,
                "documents": memories,
                "top_n": len(memories),
            }
            data = await self._post("/rerank", body, len(memories))
            items, field = _list_field(data, "results"), "relevance_score"
        else:
            body = {
                "model": self.config.model,
                "text_1": query_text,
                "text_2": memories,
            }
            data = await self._post("/score", body, len(memories))
            items, field = _list_field(data, "data"), "score"
        by_index: dict[int, float] = {}
        for item in items:
            try:
                by_index[int(item["index"])] = float(item[field])
            except (KeyError, TypeError, ValueError) as error:
                raise _RequestFailed(
                    f"bad response: result without index/{field}", "bad response"
                ) from error
        scores = []
        for index in range(len(memories)):
            value = by_index.get(index)
            if value is None or not math.isfinite(value):
                scores.append(PairScore.failure("bad response: missing score"))
            else:
                scores.append(PairScore.success(min(max(value, 0.0), 1.0)))
        return scores

    async def _score_chat(self, query: str, memory: str) -> PairScore:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": prompts.chat_messages(query, memory),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
        }
        if self._chat_yes_no_ids is not None:
            body["top_logprobs"] = 1
            body["logprob_token_ids"] = list(self._chat_yes_no_ids)
            body["return_tokens_as_token_ids"] = True
        else:
            body["top_logprobs"] = self.config.chat_top_logprobs
        try:
            data = await self._post("/v1/chat/completions", body, 1)
            choice = _choices_by_index(data, 1)[0]
            content = choice["logprobs"]["content"][0]["top_logprobs"]
            table = {entry["token"]: float(entry["logprob"]) for entry in content}
        except _RequestFailed as failure:
            return PairScore.failure(failure.reason)
        except (KeyError, IndexError, TypeError, ValueError):
            return PairScore.failure("bad response: no chat logprobs")
        if self._chat_yes_no_ids is not None:
            yes_key, no_key = (f"token_id:{i}" for i in self._chat_yes_no_ids)
        else:
            yes_key, no_key = self.config.chat_yes_token, self.config.chat_no_token
        return _normalised_yes(table.get(yes_key), table.get(no_key))


def _reason_class(reason: str) -> str:
    """``"http 503: busy"`` -> ``"http 503"``; ``"parse: ..."`` -> ``"parse"``."""
    return reason.split(":")[0]


def _list_field(data: Any, field: str) -> list[Any]:
    if not isinstance(data, dict) or not isinstance(data.get(field), list):
        raise _RequestFailed(f"bad response: no {field!r} list", "bad response")
    return data[field]


def _choices_by_index(data: Any, expected: int) -> list[dict[str, Any]]:
    choices = _list_field(data, "choices")
    if len(choices) != expected:
        raise _RequestFailed(
            f"bad response: {len(choices)} choices for {expected} prompts",
            "bad response",
        )
    try:
        ordered = sorted(choices, key=lambda choice: int(choice.get("index", 0)))
    except (AttributeError, TypeError, ValueError) as error:
        raise _RequestFailed(
            "bad response: malformed choices", "bad response"
        ) from error
    return ordered


def _yes_no_from_completion(
    choice: dict[str, Any], yes_id: int, no_id: int
) -> PairScore:
    try:
        table = choice["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        return PairScore.failure("bad response: no logprobs")
    if not isinstance(table, dict):
        return PairScore.failure("bad response: no logprobs")
    return _normalised_yes(
        table.get(f"token_id:{yes_id}"), table.get(f"token_id:{no_id}")
    )


def _normalised_yes(yes_logprob: Any, no_logprob: Any) -> PairScore:
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


def connect(
    base_url: str, model: str, mode: Mode = "yesno", **settings: Any
) -> VllmScorer:
    """Builds a checked ``VllmScorer``: ``connect(url, model, mode, timeout_s=...)``."""
    return VllmScorer(
        VllmScorerConfig(base_url=base_url, model=model, mode=mode, **settings)
    )


__all__ = [
    "API_KEY_ENV_VARS",
    "MODES",
    "Mode",
    "ScorerConfigError",
    "ScorerCounters",
    "VllmScorer",
    "VllmScorerConfig",
    "connect",
]
