"""``examples/embedding_loop.py`` runs offline and pays only for the anchors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embedding_loop.py"


def test_embedding_loop_pays_for_anchors_only_and_beats_similarity(capsys):
    spec = importlib.util.spec_from_file_location("embedding_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = module.main()
    # the paper's schedule: 10 queries x the whole pool, then 40/25/20/17.5%
    n, t = module.N, module.T
    budgets = [n] * 10 + [20] * 10 + [12] * 10 + [10] * 10 + [9] * (t - 40)
    assert summary["calls"] == sum(budgets) < summary["calls_full"] == t * n
    assert summary["recall_earm"] > summary["recall_semantic"]
    assert "scorer calls instead of" in capsys.readouterr().out
