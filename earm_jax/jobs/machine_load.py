"""How much of the machine other processes used while a timed run (a
benchmark or an experiment) ran.

A load average cannot say: it counts the benchmark's own runnable threads, so
a scorer benchmark at 16 requests in flight reads a load of 10 on an idle
2-core machine. Instead, the CPU time the whole machine spent (``/proc/stat``)
less the CPU time of this process and its descendants (alive ones by
``psutil``, finished and waited-for ones by ``os.times``), over the wall time
times the cores: the share of the machine taken by everything else.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

BUSY_SHARE = 0.25
"""Other processes above this share of the machine's CPU make a run busy."""


def _machine_busy_seconds() -> float | None:
    """CPU seconds every core spent off idle since boot (``None`` off Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(x) for x in fields[1:9]
    )
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / ticks


def _own_seconds() -> float:
    """CPU seconds of this process and its descendants, alive or reaped."""
    import psutil  # the bench extra: only a timed run needs it

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # exited between the listing and the read
            continue
    reaped = os.times()
    return total + reaped.children_user + reaped.children_system


class OtherLoad:
    """Starts measuring when made; :meth:`share` is what others used since."""

    def __init__(self) -> None:
        self._machine = _machine_busy_seconds()
        self._own = _own_seconds()
        self._wall = time.monotonic()

    def share(self) -> float | None:
        """Other processes' CPU over the wall time times the cores, in
        [0, 1] (``None`` where the machine's CPU time is not readable)."""
        machine = _machine_busy_seconds()
        if machine is None or self._machine is None:
            return None
        others = (machine - self._machine) - (_own_seconds() - self._own)
        wall = (time.monotonic() - self._wall) * (os.cpu_count() or 1)
        return min(max(others / wall, 0.0), 1.0) if wall > 0 else 0.0


def load_record(share: float | None, load_before, load_after) -> dict:
    """The JSON fields of a run's load: the load averages, the other
    processes' share of the CPU (:meth:`OtherLoad.share`, taken while every
    process the run started is still alive: a server's workers that exit
    unreaped would count as others) and ``machine_busy`` from that share
    (both ``None`` where it cannot be read)."""
    return {
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "other_processes_cpu_share": None if share is None else round(share, 4),
        "machine_busy": None if share is None else bool(share > BUSY_SHARE),
    }


__all__ = ["BUSY_SHARE", "OtherLoad", "load_record"]
