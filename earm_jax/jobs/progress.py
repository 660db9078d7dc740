"""Progress lines a person can follow in a terminal and in a log file.

Each finished step prints one line (flushed at once, so a redirected run shows
it while it runs): the phase, ``done/total``, what was done, how long it took,
the elapsed time and an ETA from the mean step time of the phase so far.

>>> import io
>>> out = io.StringIO()
>>> progress = Progress(stream=out, clock=iter(range(0, 100, 5)).__next__)
>>> progress.phase("grid", 2)
>>> progress.step("turns rank=8")
>>> print(out.getvalue().strip())
[grid 1/2] turns rank=8 — 5.0 s (elapsed 10 s, ETA 5.0 s)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def duration(seconds: float) -> str:
    """``7 s``, ``2 min 05 s``, ``1 h 03 min``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return (
            f"{seconds:.0f} s" if seconds >= 10 or seconds == 0 else f"{seconds:.1f} s"
        )
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Phases of counted steps, one printed line per step."""

    def __init__(
        self,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
        enabled: bool = True,
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.enabled = enabled
        self.start = clock()
        self.name = ""
        self.total = 0
        self.done = 0
        self._phase_start = self.start
        self._last = self.start

    def _write(self, line: str) -> None:
        if self.enabled:
            stream = self.stream or sys.stderr
            print(line, file=stream, flush=True)

    def note(self, message: str) -> None:
        """A line that is not a counted step (e.g. what is about to start)."""
        self._write(message)

    def phase(self, name: str, total: int) -> None:
        """Starts a phase of ``total`` steps."""
        self.name, self.total, self.done = name, int(total), 0
        self._phase_start = self._last = self.clock()

    def step(self, description: str, done: int | None = None) -> None:
        """One step of the phase is done (``done``: the phase's count of done
        steps, where a line stands for several)."""
        now = self.clock()
        self.done = self.done + 1 if done is None else int(done)
        took, self._last = now - self._last, now
        remaining = max(self.total - self.done, 0)
        eta = (now - self._phase_start) / self.done * remaining
        self._write(
            f"[{self.name} {self.done}/{self.total}] {description} — "
            f"{duration(took)} (elapsed {duration(now - self.start)}, "
            f"ETA {duration(eta)})"
        )

    def __call__(self, description: str) -> None:
        self.step(description)


__all__ = ["Progress", "duration"]
