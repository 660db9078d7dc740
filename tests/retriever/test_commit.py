"""After a commit nothing raises: a failed snapshot is counted, reported and
retried, and the query it followed is stored once."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from earm_jax.retriever import OnlineRetriever

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories, queries  # noqa: E402


def test_a_failing_snapshot_is_counted_reported_and_retried(tmp_path, caplog):
    asks = queries(10)
    with OnlineRetriever(
        tmp_path / "straight", KeywordScorer(), HashEmbedder(), CONFIG
    ) as straight:
        straight.add(memories(20))
        answers = [straight.query(q) for q in asks]
    expected = [a.memory_ids for a in answers]
    agent = OnlineRetriever(tmp_path / "agent", KeywordScorer(), HashEmbedder(), CONFIG)
    agent.add(memories(20))
    journal = agent._journal
    write_snapshot = journal.write_snapshot

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    journal.write_snapshot = disk_full
    got = []
    with caplog.at_level(logging.WARNING, logger="earm_jax.retriever"):
        for ask in asks[:6]:  # snapshot_every=4: due at the 4th, retried after
            got.append(agent.query(ask).memory_ids)
    assert agent.num_queries == 6
    assert agent.snapshot_failures == 3  # the 4th, 5th and 6th query
    assert "No space left on device" in agent.last_snapshot_error
    assert "snapshot failed" in caplog.text
    assert journal.latest_snapshot() is None
    journal.write_snapshot = write_snapshot
    got.append(agent.query(asks[6]).memory_ids)  # the retry succeeds
    assert agent.snapshot_failures == 3
    assert journal.latest_snapshot()[1] == 7
    got += [agent.query(q).memory_ids for q in asks[7:]]
    agent._release()  # what kill -9 leaves
    with OnlineRetriever(tmp_path / "agent", KeywordScorer(), HashEmbedder()) as again:
        assert again.num_queries == 10  # each query stored once
        assert [again.answer(i) for i in range(10)] == [a.by_score() for a in answers]
    assert got == expected
