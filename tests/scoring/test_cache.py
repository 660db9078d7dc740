"""The persistent score cache and the caching wrapper."""

from collections.abc import Sequence

from earm_jax.scoring import (
    CachedScorer,
    PairScore,
    ReplayScorer,
    ScoreCache,
    ScorerIdentity,
    export_jsonl,
)

IDENTITY = ScorerIdentity("test", "model-a", "v1", (("dtype", "float32"),))


class CountingScorer:
    """Scores len(memory)/100; fails memories containing 'bad'; logs requests."""

    def __init__(self, identity: ScorerIdentity = IDENTITY) -> None:
        self._identity = identity
        self.sent: list[tuple[str, list[str]]] = []

    @property
    def identity(self) -> ScorerIdentity:
        return self._identity

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        results = []
        for query, memories in requests:
            self.sent.append((query, list(memories)))
            results.append(
                [
                    PairScore.failure("http 503")
                    if "bad" in memory
                    else PairScore.success(len(memory) / 100)
                    for memory in memories
                ]
            )
        return results


def test_put_then_get_round_trips_only_successes():
    with ScoreCache() as cache:
        stored = cache.put_many(
            IDENTITY,
            "q",
            ["m1", "m2", "m3"],
            [
                PairScore.success(0.2),
                PairScore.failure("timeout"),
                PairScore.success(1.0),
            ],
        )
        assert stored == 2
        assert cache.get_many(IDENTITY, "q", ["m1", "m2", "m3", "m4"]) == [
            0.2,
            None,
            1.0,
            None,
        ]
        assert len(cache) == 2


def test_keys_separate_identity_prompt_version_and_query():
    other_model = ScorerIdentity("test", "model-b", "v1", IDENTITY.settings)
    other_prompt = ScorerIdentity("test", "model-a", "v2", IDENTITY.settings)
    with ScoreCache() as cache:
        cache.put_many(IDENTITY, "q", ["m"], [PairScore.success(0.5)])
        assert cache.get_many(other_model, "q", ["m"]) == [None]
        assert cache.get_many(other_prompt, "q", ["m"]) == [None]
        assert cache.get_many(IDENTITY, "q2", ["m"]) == [None]
        assert cache.get_many(IDENTITY, "q", ["m"]) == [0.5]


def test_cache_persists_across_reopen(tmp_path):
    path = tmp_path / "state" / "scores.sqlite"
    with ScoreCache(path) as cache:
        cache.put_many(IDENTITY, "q", ["m"], [PairScore.success(0.25)])
    with ScoreCache(path) as cache:
        assert cache.get_many(IDENTITY, "q", ["m"]) == [0.25]


def test_texts_are_not_stored(tmp_path):
    path = tmp_path / "scores.sqlite"
    with ScoreCache(path) as cache:
        cache.put_many(
            IDENTITY, "secret query", ["secret memory"], [PairScore.success(1)]
        )
    assert b"secret" not in path.read_bytes()


def test_many_memories_exceed_the_sqlite_parameter_limit():
    memories = [f"memory {i}" for i in range(1200)]
    with ScoreCache() as cache:
        cache.put_many(IDENTITY, "q", memories, [PairScore.success(0.5)] * 1200)
        assert cache.get_many(IDENTITY, "q", memories) == [0.5] * 1200


def test_cached_scorer_sends_only_uncached_pairs_and_never_caches_failures():
    inner = CountingScorer()
    with ScoreCache() as cache:
        scorer = CachedScorer(inner, cache)
        first = scorer.score("q", ["aa", "bad one", "aa", "bbbb"])
        assert inner.sent == [("q", ["aa", "bad one", "bbbb"])]  # duplicate sent once
        assert [s.value for s in first] == [0.02, None, 0.02, 0.04]
        assert not first[1].ok and first[1].reason == "http 503"

        inner.sent.clear()
        second = scorer.score_many([("q", ["aa", "bad one", "bbbb"]), ("q2", ["aa"])])
        assert inner.sent == [("q", ["bad one"]), ("q2", ["aa"])]
        assert [s.value for s in second[0]] == [0.02, None, 0.04]
        assert second[1][0].value == 0.02
        assert scorer.counters.hits == 2  # "aa" and "bbbb" of query "q"
        assert scorer.identity == IDENTITY

        inner.sent.clear()
        assert scorer.score("q", ["aa", "bbbb"])[1].value == 0.04
        assert inner.sent == []


class GarbageScorer(CountingScorer):
    """Answers NaN, inf, out-of-range and non-numeric values for some memories."""

    VALUES = {"nan": float("nan"), "inf": float("inf"), "big": 1.5, "neg": -0.1}

    def score_many(self, requests):
        results = []
        for query, memories in requests:
            self.sent.append((query, list(memories)))
            results.append(
                [
                    PairScore(value=self.VALUES.get(m, 0.5), ok=True)
                    if m != "text"
                    else PairScore(value="0.5", ok=True)  # type: ignore[arg-type]
                    for m in memories
                ]
            )
        return results


def test_cached_scorer_turns_garbage_into_counted_failures_never_cached():
    inner = GarbageScorer()
    memories = ["nan", "inf", "big", "neg", "text", "fine"]
    with ScoreCache() as cache:
        scorer = CachedScorer(inner, cache)
        first = scorer.score("q", memories)
        assert [s.ok for s in first] == [False] * 5 + [True]
        assert all(s.reason.startswith("invalid score") for s in first[:5])
        assert first[5].value == 0.5
        assert len(cache) == 1  # only the valid score was stored
        inner.sent.clear()
        scorer.score("q", memories)
        assert inner.sent == [("q", memories[:5])]  # garbage is asked again


def test_replay_from_cache_and_jsonl_fails_unknown_pairs(tmp_path):
    inner = CountingScorer()
    with ScoreCache() as cache:
        CachedScorer(inner, cache).score("q", ["aa", "bbbb", "bad"])
        replay = ReplayScorer.from_cache(cache, IDENTITY)
        path = tmp_path / "scores.jsonl"
        assert export_jsonl(cache, IDENTITY, path) == 2
    from_file = ReplayScorer.from_jsonl(path, IDENTITY)
    for scorer in (replay, from_file):
        scores = scorer.score("q", ["aa", "bbbb", "bad", "unknown"])
        assert [s.value for s in scores[:2]] == [0.02, 0.04]
        assert [s.reason for s in scores[2:]] == ["not recorded", "not recorded"]
        assert scorer.identity.kind == "replay"
    other = ScorerIdentity("test", "model-b", "v1")
    assert len(ReplayScorer.from_jsonl(path, other)) == 0
