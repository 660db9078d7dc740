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
The settings are in :mod:`~earm_jax.scoring.vllm_config`, the counters in
:mod:`~earm_jax.scoring.counters`, the reading of replies in
:mod:`~earm_jax.scoring.vllm_replies`; all public names are importable from
here.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx

from . import prompts
from .base import PairScore, ScorerIdentity
from .counters import ScorerCounters
from .event_loop import EventLoopThread
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
from .vllm_config import MODES, Mode, ScorerConfigError, VllmScorerConfig
from .vllm_replies import (
    RequestFailed,
    choices_by_index,
    list_field,
    normalised_yes,
    reason_class,
    yes_no_from_completion,
)


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
        self._loop_thread = EventLoopThread()
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
        settings = {**dict(config.identity_settings), **config.mode_settings()}
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

    async def ascore_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        """:meth:`score_many`, awaited from any event loop (the requests run on
        this scorer's own loop; cancelling the await cancels them)."""
        started = time.perf_counter()
        future = asyncio.run_coroutine_threadsafe(
            self._score_many_async(requests), self._loop_thread.loop
        )
        try:
            return await asyncio.wrap_future(future)
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
                    self.counters.failures[reason_class(pair.reason)] += 1
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
        score_mode = {
            "yesno": self._score_yesno,
            "text": self._score_text,
            "rerank": self._score_rerank,
            "chat": self._score_chat_pairs,
        }[self.config.mode]
        try:
            return await score_mode(query, memories)
        except RequestFailed as failure:
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
            raise RequestFailed(error.reason, reason_class(error.reason)) from None

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
        choices = choices_by_index(data, len(memories))
        return [yes_no_from_completion(choice, yes_id, no_id) for choice in choices]

    async def _score_text(self, query: str, memories: list[str]) -> list[PairScore]:
        body = {
            "model": self.config.model,
            "prompt": [prompts.text_prompt(query, memory) for memory in memories],
            "max_tokens": self.config.text_max_tokens,
            "temperature": 0.0,
        }
        data = await self._post("/v1/completions", body, len(memories))
        scores = []
        for choice in choices_by_index(data, len(memories)):
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
            items, field = list_field(data, "results"), "relevance_score"
        else:
            body = {
                "model": self.config.model,
                "text_1": query_text,
                "text_2": memories,
            }
            data = await self._post("/score", body, len(memories))
            items, field = list_field(data, "data"), "score"
        by_index: dict[int, float] = {}
        for item in items:
            try:
                by_index[int(item["index"])] = float(item[field])
            except (KeyError, TypeError, ValueError) as error:
                raise RequestFailed(
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

    async def _score_chat_pairs(
        self, query: str, memories: list[str]
    ) -> list[PairScore]:
        """``chat`` serves one pair per request."""
        return [await self._score_chat(query, memory) for memory in memories]

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
            choice = choices_by_index(data, 1)[0]
            content = choice["logprobs"]["content"][0]["top_logprobs"]
            table = {entry["token"]: float(entry["logprob"]) for entry in content}
        except RequestFailed as failure:
            return PairScore.failure(failure.reason)
        except (KeyError, IndexError, TypeError, ValueError):
            return PairScore.failure("bad response: no chat logprobs")
        if self._chat_yes_no_ids is not None:
            yes_key, no_key = (f"token_id:{i}" for i in self._chat_yes_no_ids)
        else:
            yes_key, no_key = self.config.chat_yes_token, self.config.chat_no_token
        return normalised_yes(table.get(yes_key), table.get(no_key))


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
