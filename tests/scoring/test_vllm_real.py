"""The vLLM scorer against real vLLM servers (tiny local random-weight models).

Tolerances: vLLM (float32, CPU) and transformers (float32 forward, float64
normalisation) agree on P(yes)/(P(yes)+P(no)) and sigmoid(logit) to better than
``SCORE_ATOL`` = 2e-4 absolute; batched / concurrent requests agree with
one-by-one ones to ``BATCH_ATOL`` = 1e-4 (float32 kernels may differ in the last
bits with batch shape). Random weights: these tests check protocol and numbers,
not relevance quality.
"""

from __future__ import annotations

import http.server
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from earm_jax.scoring import CachedScorer, ScoreCache, prompts
from earm_jax.scoring.answer import AnswerClientConfig, ChatEndpoint, answer_and_judge
from earm_jax.scoring.serve import start_server
from earm_jax.scoring.vllm import ScorerConfigError, VllmScorer, VllmScorerConfig

from .conftest import CROSS_ENCODER_NAME, LLM_NAME, finished_requests, server_config
from .reference import CausalLmReference, CrossEncoderReference

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SCORE_ATOL = 2e-4
BATCH_ATOL = 1e-4

QUERIES = [
    "When did Caroline go to the park?",
    "What does Melanie like to paint?",
    "Who visited the beach in summer?",
]
MEMORIES = [
    "Caroline: I went to the park with my dog on Monday.",
    "Melanie: I love painting mountains and the beach.",
    "John: my sister bought a guitar for her birthday.",
    "Maria: we went camping in the mountains last winter.",
    "Alice: coffee with Bob after yoga on tuesday.",
    "Bob: the movie about the city was great.",
]


def scorer(servers, mode="yesno", **settings) -> VllmScorer:
    server = servers.cross_encoder if mode == "rerank" else servers.llm
    config = VllmScorerConfig(
        base_url=server.base_url, model=server.model_name, mode=mode, **settings
    )
    return VllmScorer(config)


@pytest.fixture(scope="module")
def llm_reference(tiny_servers):
    return CausalLmReference(tiny_servers.llm_dir)


@pytest.fixture(scope="module")
def cross_encoder_reference(tiny_servers):
    return CrossEncoderReference(tiny_servers.cross_encoder_dir)


def test_yesno_scores_equal_transformers(tiny_servers, llm_reference):
    with scorer(tiny_servers) as client:
        results = client.score_many([(query, MEMORIES) for query in QUERIES])
    errors = []
    for query, row in zip(QUERIES, results, strict=True):
        for memory, pair in zip(MEMORIES, row, strict=True):
            assert pair.ok, pair.reason
            expected = llm_reference.completion_yes(
                prompts.yesno_prompt(query, memory), " yes", " no"
            )
            errors.append(abs(pair.value - expected))
    assert max(errors) < SCORE_ATOL
    values = [pair.value for row in results for pair in row]
    assert max(values) - min(values) > 0.01  # pairs differ: not a constant


def test_chat_scores_equal_transformers(tiny_servers, llm_reference):
    with scorer(tiny_servers, mode="chat") as client:
        row = client.score(QUERIES[0], MEMORIES)
    for memory, pair in zip(MEMORIES, row, strict=True):
        assert pair.ok, pair.reason
        expected = llm_reference.chat_yes(
            prompts.chat_messages(QUERIES[0], memory), "yes", "no"
        )
        assert abs(pair.value - expected) < SCORE_ATOL


@pytest.mark.parametrize("endpoint", ["rerank", "score"])
def test_rerank_scores_equal_transformers(
    tiny_servers, cross_encoder_reference, endpoint
):
    with scorer(tiny_servers, mode="rerank", rerank_endpoint=endpoint) as client:
        results = client.score_many([(query, MEMORIES) for query in QUERIES[:2]])
    for query, row in zip(QUERIES[:2], results, strict=True):
        for memory, pair in zip(MEMORIES, row, strict=True):
            assert pair.ok, pair.reason
            expected = cross_encoder_reference.score(query, memory)
            assert abs(pair.value - expected) < SCORE_ATOL


@pytest.mark.parametrize("mode", ["yesno", "rerank"])
def test_batched_and_concurrent_equal_one_by_one(tiny_servers, mode):
    requests = [(query, MEMORIES) for query in QUERIES]
    with scorer(tiny_servers, mode, max_prompts_per_request=1, max_in_flight=1) as c:
        one_by_one = [[c.score(q, [m])[0] for m in ms] for q, ms in requests]
        assert c.counters.requests == len(QUERIES) * len(MEMORIES)
    with scorer(tiny_servers, mode, max_in_flight=1) as c:
        batched = [c.score(q, ms) for q, ms in requests]
        assert c.counters.requests == len(QUERIES)
    with scorer(tiny_servers, mode, max_prompts_per_request=4, max_in_flight=4) as c:
        concurrent = c.score_many(requests)
        assert c.counters.requests == len(QUERIES) * 2
    for other in (batched, concurrent):
        for row_a, row_b in zip(one_by_one, other, strict=True):
            for a, b in zip(row_a, row_b, strict=True):
                assert a.ok and b.ok
                assert abs(a.value - b.value) < BATCH_ATOL


@pytest.mark.parametrize("mode", ["yesno", "chat", "text", "rerank"])
def test_call_counter_equals_pairs_the_server_computed(tiny_servers, mode):
    server = tiny_servers.cross_encoder if mode == "rerank" else tiny_servers.llm
    before = finished_requests(server)
    with scorer(tiny_servers, mode, max_prompts_per_request=4) as client:
        with ScoreCache() as cache:
            cached = CachedScorer(client, cache)
            cached.score_many([(query, MEMORIES) for query in QUERIES[:2]])
            sent = client.counters.pairs_sent
            assert client.counters.calls == sent == 2 * len(MEMORIES)
            assert finished_requests(server) - before == sent
            # Scored pairs are not paid for again (text mode: failures are retried).
            cached.score_many([(query, MEMORIES) for query in QUERIES[:2]])
            retried = client.counters.pairs_failed if mode == "text" else 0
            assert client.counters.pairs_sent == sent + min(retried, sent)
            assert finished_requests(server) - before == client.counters.pairs_sent


def test_text_mode_reports_parse_failures_not_defaults(tiny_servers):
    with scorer(tiny_servers, mode="text") as client:
        row = client.score(QUERIES[0], MEMORIES)
    for pair in row:
        assert (pair.ok and 0.0 <= pair.value <= 1.0) or pair.reason.startswith("parse")
    failed = sum(not pair.ok for pair in row)
    assert client.counters.parse_failures == failed
    assert failed > 0  # random weights do not write numbers


def test_wrong_model_name_is_a_config_error(tiny_servers):
    config = VllmScorerConfig(base_url=tiny_servers.llm.base_url, model="gpt-nope")
    with pytest.raises(ScorerConfigError, match="not served.*tiny-llm"):
        VllmScorer(config)


def test_non_vllm_server_is_a_config_error():
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(ScorerConfigError, match="not an OpenAI-compatible"):
            VllmScorer(VllmScorerConfig(base_url=url, model=LLM_NAME))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_rerank_mode_on_a_generative_model_fails_pairs_with_reason(tiny_servers):
    config = VllmScorerConfig(
        base_url=tiny_servers.llm.base_url, model=LLM_NAME, mode="rerank", max_retries=0
    )
    with VllmScorer(config) as client:
        row = client.score(QUERIES[0], MEMORIES[:2])
    assert not any(pair.ok for pair in row)
    assert all(pair.reason.startswith("http 4") for pair in row)


def test_an_over_long_memory_fails_only_its_request(tiny_servers):
    too_long = "park " * 2000  # far beyond --max-model-len 512
    with scorer(tiny_servers, max_prompts_per_request=2) as client:
        row = client.score(
            QUERIES[0], [MEMORIES[0], MEMORIES[1], too_long, MEMORIES[2]]
        )
    assert [pair.ok for pair in row] == [True, True, False, False]
    assert row[2].reason.startswith("http 400")
    assert client.counters.retries == 0


def test_hung_then_killed_server(tiny_servers, tmp_path):
    """A real server frozen with SIGSTOP times out; after SIGCONT it answers;
    killed, its pairs fail with connection errors after bounded retries."""
    config = server_config(
        tiny_servers.python,
        tiny_servers.cross_encoder_dir,
        CROSS_ENCODER_NAME,
        "pooling",
        "1",
        tmp_path / "doomed.log",
    )
    server = start_server(config, startup_timeout_s=420.0)
    try:
        client_config = VllmScorerConfig(
            base_url=server.base_url,
            model=CROSS_ENCODER_NAME,
            mode="rerank",
            timeout_s=3.0,
            connect_timeout_s=2.0,
            max_retries=2,
            backoff_base_s=0.1,
            backoff_max_s=0.5,
        )
        with VllmScorer(client_config) as client:
            httpx.post(
                server.base_url + "/rerank",
                json={"model": CROSS_ENCODER_NAME, "query": "a", "documents": ["b"]},
                timeout=180.0,
            )
            assert all(pair.ok for pair in client.score(QUERIES[0], MEMORIES))

            os.kill(server.process.pid, signal.SIGSTOP)
            try:
                started = time.perf_counter()
                row = client.score(QUERIES[0], MEMORIES)
                hung_s = time.perf_counter() - started
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            assert [pair.reason for pair in row] == ["timeout"] * len(MEMORIES)
            assert hung_s < 3.0 * 2 + 2.0  # one timeout, no retries of timeouts
            assert all(pair.ok for pair in client.score(QUERIES[1], MEMORIES))

            server.stop(timeout_s=30.0)
            retries_before = client.counters.retries
            started = time.perf_counter()
            row = client.score(QUERIES[2], MEMORIES)
            assert time.perf_counter() - started < 10.0
            assert all(pair.reason.startswith("connection") for pair in row)
            assert client.counters.retries - retries_before == 2
            assert client.counters.failures["connection"] == len(MEMORIES)
    finally:
        server.stop()


def test_answer_and_judge_runs_against_a_real_chat_endpoint(tiny_servers):
    endpoint = ChatEndpoint(tiny_servers.llm.base_url, LLM_NAME, max_tokens=8)
    result = answer_and_judge(
        AnswerClientConfig(endpoint), QUERIES[0], MEMORIES[:3], "on Monday"
    )
    # Random weights answer gibberish: the judge's reply is graded or failed
    # as unparsable, never guessed.
    assert result.answer_prompt_version == "answer-v1"
    assert result.verdict in ("correct", "incorrect", "failed")
    if result.verdict == "failed":
        assert result.reason.startswith("parse")


# A terminal's foreground job takes Ctrl-C; a command started in the background
# of a non-interactive shell (a CI step's "cmd &", nohup) inherits SIGINT
# ignored, and Python then leaves it ignored. The command is started here as
# from a terminal, whatever the test run was started from.
_CLI = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import typer
from earm_jax.cli.serve_scorer import register
app = typer.Typer()
register(app)
@app.command("noop")
def noop() -> None:
    pass
app()
"""


def test_serve_scorer_command_starts_and_stops_a_real_server(tiny_servers):
    command = [
        sys.executable,
        "-c",
        _CLI,
        "serve-scorer",
        "--model",
        str(tiny_servers.cross_encoder_dir),
        "--served-model-name",
        CROSS_ENCODER_NAME,
        "--runner",
        "pooling",
        "--port",
        "0",
        "--max-model-len",
        "512",
        "--cpu-kvcache-gib",
        "1",
        "--python",
        tiny_servers.python,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    )
    reader.start()
    try:
        base_url = lines.get(timeout=420.0).strip()
        assert base_url.startswith("http://127.0.0.1:")
        assert httpx.get(base_url + "/health", timeout=10.0).status_code == 200
        config = VllmScorerConfig(base_url, CROSS_ENCODER_NAME, mode="rerank")
        with VllmScorer(config) as client:
            assert all(pair.ok for pair in client.score(QUERIES[0], MEMORIES[:2]))
        process.send_signal(signal.SIGINT)  # Ctrl-C
        # The command's own stop is bounded (30 s for SIGTERM, then 10 s after
        # SIGKILL); the rest is for the interpreter's teardown on a loaded
        # machine. It is a bound on a hang, not a timing.
        assert process.wait(timeout=120.0) == 0
        with pytest.raises(httpx.TransportError):
            httpx.get(base_url + "/health", timeout=5.0)
    finally:
        if process.poll() is None:
            process.terminate()  # the command stops its server on SIGTERM too
            process.wait(timeout=60.0)
        reader.join(timeout=10.0)
        process.stdout.close()
