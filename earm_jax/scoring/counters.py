"""What a scoring client did: calls, requests, failures by kind, latencies."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any


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


__all__ = ["ScorerCounters"]
