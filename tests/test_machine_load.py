"""earm_jax/jobs/machine_load.py: the CPU of other processes, never the run's own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from earm_jax.jobs import machine_load as _machine_load
from earm_jax.jobs.machine_load import OtherLoad, load_record


def test_a_reaped_child_counts_as_the_run_s_own_cpu():
    before = _machine_load._own_seconds()
    burn = "import time\nwhile time.process_time() < 0.5:\n    pass\n"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert _machine_load._own_seconds() - before >= 0.45


@pytest.mark.parametrize(
    ("machine", "own", "busy"),
    [(10.0, 9.0, False), (10.0, 2.0, True), (4.0, 4.0, False)],
)
def test_the_share_is_the_machine_s_cpu_less_the_run_s(monkeypatch, machine, own, busy):
    clock = {"machine": 100.0, "own": 50.0, "wall": 0.0}
    monkeypatch.setattr(
        _machine_load, "_machine_busy_seconds", lambda: clock["machine"]
    )
    monkeypatch.setattr(_machine_load, "_own_seconds", lambda: clock["own"])
    monkeypatch.setattr(_machine_load.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(_machine_load.os, "cpu_count", lambda: 2)
    other = OtherLoad()
    clock.update(machine=100.0 + machine, own=50.0 + own, wall=8.0)
    expected = (machine - own) / 16.0
    assert other.share() == pytest.approx(expected)
    record = load_record(other.share(), (1.0, 1.0, 1.0), (9.0, 5.0, 3.0))
    assert record["machine_busy"] is busy
    assert record["other_processes_cpu_share"] == pytest.approx(expected, abs=1e-4)
    assert record["load_average_after"] == [9.0, 5.0, 3.0]


def test_unreadable_machine_time_is_unknown_not_idle(monkeypatch):
    monkeypatch.setattr(_machine_load, "_machine_busy_seconds", lambda: None)
    record = load_record(OtherLoad().share(), (0.0,) * 3, (0.0,) * 3)
    assert record["other_processes_cpu_share"] is None
    assert record["machine_busy"] is None
