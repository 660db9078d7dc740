"""Client fault handling against a local stub server (fault injection only).

Scores are checked against real vLLM in ``test_vllm_real.py``; here the stub
only produces the failures a real server is hard to make on demand.
"""

import json
import random
import time

import pytest

from earm_jax.scoring.http import backoff_delay
from earm_jax.scoring.vllm import (
    ScorerConfigError,
    VllmScorer,
    VllmScorerConfig,
)

from .stub_server import StubServer, expected_yes, yesno_completion

FAST = dict(
    timeout_s=1.0, connect_timeout_s=1.0, backoff_base_s=0.01, backoff_max_s=0.05
)


def make_scorer(stub: StubServer, **settings) -> VllmScorer:
    options = {**FAST, **settings}
    return VllmScorer(
        VllmScorerConfig(base_url=stub.base_url, model=stub.model, **options)
    )


def ok(path, body, count):
    return 200, yesno_completion(body)


def test_backoff_is_exponential_jittered_and_capped():
    rng = random.Random(1)
    for attempt in range(8):
        ceiling = min(4.0, 0.5 * 2**attempt)
        delays = [backoff_delay(attempt, 0.5, 4.0, rng=rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > 0.5 * ceiling
    assert backoff_delay(3, 0.5, 4.0, retry_after_s=2.0) == 2.0
    assert backoff_delay(3, 0.5, 4.0, retry_after_s=60.0) == 4.0


def test_batches_and_counts_against_the_stub():
    with StubServer(ok) as stub, make_scorer(stub, max_prompts_per_request=3) as scorer:
        results = scorer.score_many([("q1", ["a", "b", "c", "d"]), ("q2", ["e"])])
        assert [len(r) for r in results] == [4, 1]
        assert all(
            s.ok and s.value == pytest.approx(expected_yes())
            for r in results
            for s in r
        )
        assert stub.post_counts["/v1/completions"] == 3  # 3 + 1 prompts, then 1
        assert scorer.counters.calls == 5
        assert scorer.counters.pairs_sent == stub.prompts_received == 5
        assert scorer.counters.requests == 3
        assert scorer.counters.retries == 0


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_errors_are_retried_then_succeed(status):
    def flaky(path, body, count):
        if count < 2:
            return status, b'{"error": {"message": "busy"}}', {"Retry-After": "0"}
        return 200, yesno_completion(body)

    with StubServer(flaky) as stub, make_scorer(stub, max_retries=3) as scorer:
        scores = scorer.score("q", ["a", "b"])
        assert all(s.ok for s in scores)
        assert scorer.counters.retries == 2
        assert scorer.counters.requests == 3
        assert scorer.counters.pairs_sent == 6 == stub.prompts_received
        assert scorer.counters.calls == 2


def test_persistent_5xx_fails_the_pairs_after_bounded_retries():
    def broken(path, body, count):
        return 503, b'{"error": {"message": "overloaded"}}'

    with StubServer(broken) as stub, make_scorer(stub, max_retries=2) as scorer:
        scores = scorer.score("q", ["a", "b"])
        assert [s.ok for s in scores] == [False, False]
        assert scores[0].reason.startswith("http 503")
        assert stub.post_counts["/v1/completions"] == 3
        assert scorer.counters.failures["http 503"] == 2
        assert scorer.counters.pairs_failed == 2


def test_client_errors_are_not_retried():
    def bad_request(path, body, count):
        return 400, b'{"error": {"message": "prompt too long"}}'

    with StubServer(bad_request) as stub, make_scorer(stub) as scorer:
        scores = scorer.score("q", ["a"])
        assert scores[0].reason == "http 400: prompt too long"
        assert stub.post_counts["/v1/completions"] == 1


def test_hung_server_times_out_without_retry_and_other_queries_survive():
    def hang_for_q1(path, body, count):
        if any("hang-me" in prompt for prompt in body["prompt"]):
            return "hang"
        return 200, yesno_completion(body)

    with StubServer(hang_for_q1) as stub, make_scorer(stub, timeout_s=0.5) as scorer:
        started = time.perf_counter()
        results = scorer.score_many([("hang-me", ["a", "b"]), ("fine", ["c"])])
        elapsed = time.perf_counter() - started
        assert [s.reason for s in results[0]] == ["timeout", "timeout"]
        assert results[1][0].ok
        assert elapsed < 3.0
        assert scorer.counters.retries == 0
        assert scorer.counters.failures["timeout"] == 2


@pytest.mark.parametrize(
    "payload",
    [b"<html>oops</html>", b'{"choices": "nope"}', b'{"choices": []}', b"[1, 2]"],
)
def test_garbage_replies_fail_the_pairs(payload):
    with (
        StubServer(lambda p, b, c: (200, payload)) as stub,
        make_scorer(stub) as scorer,
    ):
        scores = scorer.score("q", ["a", "b"])
        assert not any(s.ok for s in scores)
        assert all(s.reason.startswith("bad response") for s in scores)
        assert scorer.counters.retries == 0


def test_a_choice_without_logprobs_fails_only_that_pair():
    def partial(path, body, count):
        reply = json.loads(yesno_completion(body))
        reply["choices"][1]["logprobs"] = None
        return 200, json.dumps(reply).encode()

    with StubServer(partial) as stub, make_scorer(stub) as scorer:
        scores = scorer.score("q", ["a", "b", "c"])
        assert [s.ok for s in scores] == [True, False, True]


def test_dropped_connections_are_retried_then_reported():
    with (
        StubServer(lambda p, b, c: "drop") as stub,
        make_scorer(stub, max_retries=2) as s,
    ):
        scores = s.score("q", ["a"])
        assert scores[0].reason.startswith("connection")
        assert s.counters.retries == 2
        assert stub.post_counts["/v1/completions"] == 3


def test_wrong_model_name_is_a_config_error():
    with StubServer(ok) as stub:
        config = VllmScorerConfig(base_url=stub.base_url, model="no-such-model", **FAST)
        with pytest.raises(ScorerConfigError, match="not served"):
            VllmScorer(config)


def test_a_refused_api_key_says_unauthorised_and_names_the_key_variables():
    with StubServer(ok, models_status=401) as stub:
        with pytest.raises(ScorerConfigError, match="unauthorised") as raised:
            make_scorer(stub, api_key_env=("EARM_TEST_KEY",))
    assert "EARM_TEST_KEY" in str(raised.value)
    assert "not an OpenAI-compatible" not in str(raised.value)


def test_unreachable_server_is_a_config_error():
    with StubServer(ok) as stub:
        url = stub.base_url
    config = VllmScorerConfig(base_url=url, model="m", max_retries=1, **FAST)
    with pytest.raises(ScorerConfigError, match="cannot reach"):
        VllmScorer(config)


def test_text_mode_counts_parse_failures():
    replies = ["0.8", "very relevant", "2.0"]

    def text(path, body, count):
        choices = [{"index": i, "text": t} for i, t in enumerate(replies)]
        return 200, json.dumps({"choices": choices}).encode()

    with StubServer(text) as stub, make_scorer(stub, mode="text") as scorer:
        scores = scorer.score("q", ["a", "b", "c"])
        assert scores[0].value == pytest.approx(0.8)
        assert [s.ok for s in scores] == [True, False, False]
        assert all(s.reason.startswith("parse") for s in scores[1:])
        assert scorer.counters.parse_failures == 2
        assert scorer.counters.failures["parse"] == 2


def test_api_key_is_sent_but_never_in_identity_or_repr(monkeypatch):
    seen = {}

    class KeyStub(StubServer):
        pass

    def capture(path, body, count):
        return 200, yesno_completion(body)

    monkeypatch.setenv("EARM_SCORER_API_KEY", "sk-test-secret")
    with KeyStub(capture) as stub, make_scorer(stub) as scorer:
        seen["headers"] = scorer._headers
        assert scorer.score("q", ["a"])[0].ok
        assert "sk-test-secret" not in repr(scorer.config)
        assert "sk-test-secret" not in scorer.identity.key()
    assert seen["headers"]["Authorization"] == "Bearer sk-test-secret"


def test_yesno_needs_vllm_tokenize():
    with StubServer(ok, has_tokenize=False) as stub:
        config = VllmScorerConfig(base_url=stub.base_url, model=stub.model, **FAST)
        with pytest.raises(ScorerConfigError, match="not vLLM-compatible"):
            VllmScorer(config)


def test_chat_mode_without_tokenize_matches_top_logprobs_by_text():
    def chat(path, body, count):
        assert "logprob_token_ids" not in body and body["top_logprobs"] == 20
        top = [
            {"token": "yes", "logprob": -1.0},
            {"token": "no", "logprob": -2.0},
            {"token": "maybe", "logprob": -0.5},
        ]
        choice = {"index": 0, "logprobs": {"content": [{"top_logprobs": top}]}}
        return 200, json.dumps({"choices": [choice]}).encode()

    with (
        StubServer(chat, has_tokenize=False) as stub,
        make_scorer(stub, mode="chat") as scorer,
    ):
        scores = scorer.score("q", ["a", "b"])
        assert [s.value for s in scores] == pytest.approx([expected_yes()] * 2)
        assert stub.post_counts["/v1/chat/completions"] == 2


def test_ascore_many_awaits_the_scorer_loop_and_cancels_cleanly():
    import asyncio

    def hang_for_q2(path, body, count):
        if any("q2" in prompt for prompt in body["prompt"]):
            return "hang"
        return 200, yesno_completion(body)

    with StubServer(hang_for_q2) as stub, make_scorer(stub, timeout_s=5.0) as scorer:

        async def run():
            results = await scorer.ascore_many([("q1", ["a", "b"]), ("q3", ["c"])])
            hung = asyncio.create_task(scorer.ascore_many([("q2", ["d"])]))
            await asyncio.sleep(0.2)
            hung.cancel()
            with pytest.raises(asyncio.CancelledError):
                await hung
            return results

        results = asyncio.run(run())
        assert [len(r) for r in results] == [2, 1]
        assert all(
            s.ok and s.value == pytest.approx(expected_yes())
            for r in results
            for s in r
        )
        # The scorer still answers synchronously after a cancelled request.
        assert scorer.score("q1", ["e"])[0].ok
