"""Settings of the vLLM scoring client, and the error a server that cannot
serve them raises at set-up."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from . import prompts
from .http import API_KEY_ENV_VARS

Mode = Literal["yesno", "rerank", "chat", "text"]
MODES: tuple[str, ...] = ("yesno", "rerank", "chat", "text")

_PROMPT_VERSIONS = {
    "yesno": prompts.YESNO_PROMPT_VERSION,
    "rerank": prompts.RERANK_PROMPT_VERSION,
    "chat": prompts.CHAT_PROMPT_VERSION,
    "text": prompts.TEXT_PROMPT_VERSION,
}


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

    def mode_settings(self) -> dict[str, str]:
        """The settings of this mode that change its scores (in the identity)."""
        return _MODE_SETTINGS[self.mode](self)


_MODE_SETTINGS: dict[str, Callable[[VllmScorerConfig], dict[str, str]]] = {
    "yesno": lambda c: {"tokens": f"{c.yes_token!r}/{c.no_token!r}"},
    "chat": lambda c: {"tokens": f"{c.chat_yes_token!r}/{c.chat_no_token!r}"},
    "text": lambda c: {"max_tokens": str(c.text_max_tokens)},
    "rerank": lambda c: {"endpoint": c.rerank_endpoint},
}


__all__ = ["MODES", "Mode", "ScorerConfigError", "VllmScorerConfig"]
