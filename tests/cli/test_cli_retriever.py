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


def test_check_and_repair_take_the_key_file_of_a_keyed_folder(tmp_path):
    folder, key_file = tmp_path / "agent", tmp_path / "agent.key"
    with OnlineRetriever(
        folder, KeywordScorer(), HashEmbedder(), CONFIG, key_file=key_file
    ) as agent:
        agent.add(memories(6))
        agent.query(queries(1)[0])
    runner = CliRunner()
    keyed = ["--key-file", str(key_file)]
    result = runner.invoke(app, ["retriever", "check", str(folder), "--deep", *keyed])
    assert result.exit_code == 0, result.output
    assert "ok (6 memories, 1 queries" in result.output
    for command in ("check", "repair"):
        refused = runner.invoke(app, ["retriever", command, str(folder)])
        assert refused.exit_code == 1, refused.output
        assert "is keyed" in refused.output and "--key-file" in refused.output
    fixed = runner.invoke(app, ["retriever", "repair", str(folder), *keyed])
    assert fixed.exit_code == 0 and "nothing to repair" in fixed.output
