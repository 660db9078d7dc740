"""``earm retriever check|repair PATH``."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from typer.testing import CliRunner

from earm_jax.cli.main import app
from earm_jax.retriever import OnlineRetriever

sys.path.insert(0, str(Path(__file__).parents[1] / "retriever"))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories, queries  # noqa: E402


def test_check_and_repair_commands(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(memories(20))
        for query in queries(5):
            agent.query(query)
    runner = CliRunner()
    result = runner.invoke(app, ["retriever", "check", str(tmp_path), "--deep"])
    assert result.exit_code == 0, result.output
    assert "ok (20 memories, 5 queries" in result.output
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None):
        locked = runner.invoke(app, ["retriever", "check", str(tmp_path)])
    assert locked.exit_code == 2 and "in use by process" in locked.output
    db = sqlite3.connect(tmp_path / "journal.sqlite")
    db.execute("UPDATE chunks SET data = randomblob(length(data))")
    db.commit()
    db.close()
    bad = runner.invoke(app, ["retriever", "check", str(tmp_path)])
    assert bad.exit_code == 1 and "journal.sqlite: snapshot leaf" in bad.output
    fixed = runner.invoke(app, ["retriever", "repair", str(tmp_path)])
    assert fixed.exit_code == 0 and "rebuilt the solver state" in fixed.output
    assert runner.invoke(app, ["retriever", "check", str(tmp_path)]).exit_code == 0
    missing = runner.invoke(app, ["retriever", "check", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "missing" in missing.output
