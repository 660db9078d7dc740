"""A LoCoMo job holds its EARM as one ``EarmSettings`` and records it flat.

Committed result JSONs record the job as one flat ``config`` (``preset``,
``call_budget``, ... beside ``scorer`` and ``ks``); what readers and tests look
up there must stay where it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from earm_jax.jobs.locomo import LocomoJob
from earm_jax.settings import SIMILARITY_HEAD, EarmSettings

REPO = Path(__file__).resolve().parents[2]
RETIRED_KEYS = {"scorer_dtype"}  # a flag since folded into scorer_backend


def _committed_locomo_configs() -> list[tuple[str, dict]]:
    found = []
    for folder in ("benchmarks/results", "experiments/results"):
        for path in sorted((REPO / folder).glob("*.json")):
            payload = json.loads(path.read_text())
            if not isinstance(payload, dict):
                continue
            if str(payload.get("command", "")).startswith("earm locomo"):
                found.append((path.name, payload["config"]))
    return found


COMMITTED = _committed_locomo_configs()


def test_committed_locomo_results_exist():
    assert len(COMMITTED) >= 5


@pytest.mark.parametrize("name, config", COMMITTED, ids=[n for n, _ in COMMITTED])
def test_the_config_keeps_every_key_a_committed_result_has(name, config):
    written = LocomoJob(data="data").to_json()
    assert set(config) - RETIRED_KEYS <= set(written), name
    assert not any(isinstance(value, dict) for value in written.values())


def test_the_settings_are_written_beside_the_jobs_own_fields():
    earm = EarmSettings(preset="best", call_budget=0.15, l2=0.3, num_sweeps=2)
    written = LocomoJob(data="data", ranks=(2, 4), earm=earm).to_json()
    assert (written["preset"], written["call_budget"], written["l2"]) == (
        "best",
        0.15,
        0.3,
    )
    assert written["ranks"] == (2, 4) and "rank" not in written
    assert "earm" not in written and "auto_budget_scale" not in written


def test_a_found_budget_scale_is_recorded_as_auto():
    job = LocomoJob(data="data", auto_budget_scale=True)
    assert job.to_json()["budget_scale"] == "auto"
    assert LocomoJob(data="data").to_json()["budget_scale"] == 1.0


def test_each_run_reads_the_settings_at_the_grids_rank():
    earm = EarmSettings(preset="best", l2=0.3, budget_scale=0.5, call_order="learned")
    job = LocomoJob(data="data", ranks=(2,), earm=earm, expand=3)
    run = job.run_settings(2)
    assert (run.rank, run.l2, run.preset, run.call_order) == (2, 0.3, "best", "learned")
    assert (run.budget_scale, run.expand) == (0.5, 3)
    assert job.run_settings(2, budget_scale=0.8).budget_scale == 0.8
    # Found on the conversations: 1 until it is.
    found = LocomoJob(data="data", earm=earm, auto_budget_scale=True)
    assert found.run_settings(2).budget_scale == 1.0


def test_a_rank_in_the_settings_is_refused_naming_the_grid():
    job = LocomoJob(data="data", earm=EarmSettings(rank=2))
    with pytest.raises(ValueError, match=r"earm\.rank=2 is not read.*ranks=\(2,\)"):
        job.validate()


def test_the_call_order_and_the_stop_rule_reach_best():
    # The default best: the embedding order after a similarity head, spending.
    config = LocomoJob(data="data", ranks=(2,), earm=EarmSettings(preset="best"))
    adaptive = config.run_settings(2).adaptive_config(200)
    assert (adaptive.call_order, adaptive.stop_rule) == ("embedding", "spend")
    assert adaptive.similarity_share == SIMILARITY_HEAD
    earm = EarmSettings(
        preset="best", call_order="similarity", stop_rule="settle_or_spill"
    )
    adaptive = LocomoJob(data="data", ranks=(2,), earm=earm).run_settings(2)
    adaptive = adaptive.adaptive_config(200)
    assert (adaptive.call_order, adaptive.stop_rule) == (
        "similarity",
        "settle_or_spill",
    )
    assert adaptive.similarity_share == 0.0
    with pytest.raises(ValueError, match="EarmSettings.stop_rule"):
        EarmSettings(stop_rule="settle")
