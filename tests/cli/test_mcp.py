"""``earm mcp`` for real: the MCP SDK's client starts the server as a
subprocess (stdio) or talks to it over streamable HTTP on 127.0.0.1; it
remembers 50 LoCoMo turns, recalls, forgets, gets tool errors, kills the
server with SIGKILL mid-recall and restarts it with nothing acknowledged lost.
Over HTTP: no valid bearer token is 401, a token reaches only its tenants, a
foreign Host or Origin is refused, 1,000 tenant names open at most the cap and
create at most --max-tenants folders, a second server on the folder is one
line. --preset, --query-retention, --free-order and --key-file reach every
tenant (refused combinations are one line before the server starts). The scorer is an
in-process cross-encoder folder (tiny, random weights: the protocol is tested
here, not the ranking); without one the server runs in similarity mode and
says so; a trained-scorer folder whose manifest measured it below similarity
is refused unless forced."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optional_extras import require_extra

require_extra("mcp")
require_extra("sentence_transformers")

import httpx2  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from earm_jax.locomo import build_memories, load_locomo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600.0

pytestmark = [pytest.mark.slow, pytest.mark.locomo]


@pytest.fixture(scope="module")
def scorer_model(tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "scoring"))
    from tiny_models import build_cross_encoder

    return build_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "model")


@pytest.fixture(scope="module")
def locomo_turns(locomo_path):
    (conversation,) = [c for c in load_locomo(locomo_path) if c.sample_id == "26"]
    memory_set = build_memories(conversation, "turns")
    turns = [m.text for m in memory_set.memories[:50]]
    questions = [q.question for q in memory_set.queries[:3]]
    return turns, questions


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory) -> Path:
    """One persistent JAX compilation cache for this module's servers: every
    server start and restart compiles the same programs, once."""
    return tmp_path_factory.mktemp("jax-cache")


def _env(compilation_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.update(HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env.update(
        JAX_COMPILATION_CACHE_DIR=str(compilation_cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    return env


def _command(folder: Path, model: Path | None, *extra: str) -> list[str]:
    """The server's command line (``model=None``: similarity mode)."""
    scorer = [] if model is None else ["--scorer-model", str(model)]
    return [
        sys.executable,
        "-m",
        "earm_jax.cli.main",
        "mcp",
        str(folder),
        *scorer,
        *extra,
    ]


def _server_pids(folder: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in cmdline and str(folder).encode() in cmdline:
            pids.append(int(entry.name))
    return pids


async def _first_session(client_of, kill, turns, questions) -> dict:
    """Remembers, recalls, forgets; kills the server mid-recall. Returns what
    was acknowledged."""
    acknowledged: dict = {"ids": {}, "gone": None, "recalls": 0, "killed": False}
    try:
        async with client_of() as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"remember", "recall", "update", "forget", "get", "stats"}
            for i, text in enumerate(turns):
                reply = await client.call_tool(
                    "remember", {"text": text, "metadata": {"turn": i}}
                )
                assert not reply.is_error, reply.content
                acknowledged["ids"][reply.structured_content["id"]] = text
            reply = await client.call_tool("recall", {"query": questions[0], "k": 5})
            assert not reply.is_error, reply.content
            acknowledged["recalls"] += 1
            found = reply.structured_content["memories"]
            assert len(found) == 5
            gone = found[0]["id"]
            reply = await client.call_tool("forget", {"ids": [gone]})
            assert not reply.is_error
            acknowledged["gone"] = gone
            del acknowledged["ids"][gone]
            reply = await client.call_tool("recall", {"query": questions[0], "k": 50})
            acknowledged["recalls"] += 1
            assert gone not in {m["id"] for m in reply.structured_content["memories"]}
            # Errors are tool errors with one line; the server keeps serving.
            # get returns what exists and names what does not.
            some = list(acknowledged["ids"])[:2]
            reply = await client.call_tool("get", {"ids": [*some, gone]})
            assert not reply.is_error, reply.content
            assert [m["id"] for m in reply.structured_content["memories"]] == some
            assert reply.structured_content["missing"] == [gone]
            for name, arguments in (
                ("recall", {"query": "   ", "k": 5}),
                ("remember", {"text": "x", "tenant": "../escape"}),
                ("update", {"id": "no-such-id", "text": "y"}),
            ):
                reply = await client.call_tool(name, arguments)
                assert reply.is_error, (name, reply)
                (content,) = reply.content
                assert "\n" not in content.text and content.text
            reply = await client.call_tool("stats", {})
            stats = reply.structured_content
            assert stats["memories"] == 49 and stats["queries"] == 2
            assert 0 < stats["calls_paid"] <= stats["full_pool_calls"] == 50 + 49
            # A recall in flight when the server is killed.
            recall = asyncio.create_task(
                client.call_tool("recall", {"query": questions[1], "k": 5})
            )
            await asyncio.sleep(0.02)
            acknowledged["killed"] = True
            kill()
            try:
                await asyncio.wait_for(recall, 60)
            except BaseException:  # noqa: BLE001 - the server is gone
                pass
    except BaseException as error:  # noqa: BLE001 - the connection died with it
        # Only the planned kill may end the session: anything before it (a
        # crash on a bad-input call, a lost connection) fails the test.
        if isinstance(error, AssertionError) or not acknowledged["killed"]:
            raise
        if isinstance(error, BaseExceptionGroup):
            failed = error.subgroup(AssertionError)
            if failed is not None:
                raise failed from None
    return acknowledged


async def _second_session(client_of, acknowledged, questions) -> None:
    async with client_of() as client:
        ids = list(acknowledged["ids"])
        reply = await client.call_tool("get", {"ids": ids})
        assert not reply.is_error, reply.content
        stored = {m["id"]: m["text"] for m in reply.structured_content["memories"]}
        assert stored == acknowledged["ids"]
        reply = await client.call_tool("get", {"ids": [acknowledged["gone"]]})
        assert not reply.is_error and not reply.structured_content["memories"]
        assert reply.structured_content["missing"] == [acknowledged["gone"]]
        reply = await client.call_tool("recall", {"query": questions[2], "k": 49})
        got = {m["id"] for m in reply.structured_content["memories"]}
        assert acknowledged["gone"] not in got and len(got) == 49
        stats = (await client.call_tool("stats", {})).structured_content
        assert stats["memories"] == 49
        assert stats["queries"] >= acknowledged["recalls"] + 1


def test_stdio_server_survives_sigkill(
    tmp_path, scorer_model, locomo_turns, compilation_cache
):
    turns, questions = locomo_turns
    folder = tmp_path / "memory"
    # An embedding cache an earlier version kept beside the tenants (it
    # outlived forgotten texts): removed at start; each tenant caches in its
    # own folder instead.
    stale = folder / ".embedding-cache"
    stale.mkdir(parents=True)
    (stale / "embeddings-old.sqlite").write_bytes(b"a forgotten text's vector")
    command = _command(folder, scorer_model)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=_env(compilation_cache)
    )

    def client_of():
        return Client(params, read_timeout_seconds=TIMEOUT_S)

    def kill():
        pids = _server_pids(folder)
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    acknowledged = asyncio.run(_first_session(client_of, kill, turns, questions))
    assert len(acknowledged["ids"]) == 49
    time.sleep(0.5)
    asyncio.run(_second_session(client_of, acknowledged, questions))
    assert not stale.exists()
    caches = list(folder.rglob("embeddings-*.sqlite"))
    assert [cache.parent for cache in caches] == [folder / "default"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_http(
    folder: Path, model: Path | None, compilation_cache: Path, *extra: str
) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    log = folder.parent / f"server-{port}.log"
    access = extra or ("--no-auth",)
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            _command(folder, model, "--http", f"127.0.0.1:{port}", *access),
            env=_env(compilation_cache),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(log.read_text()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.2)
    process.kill()
    process.wait()
    raise AssertionError("the HTTP server did not start")


def test_streamable_http_server_survives_sigkill(
    tmp_path, scorer_model, locomo_turns, compilation_cache
):
    turns, questions = locomo_turns
    folder = tmp_path / "memory"
    process, url = _start_http(folder, scorer_model, compilation_cache)
    try:
        acknowledged = asyncio.run(
            _first_session(
                lambda: Client(url, read_timeout_seconds=TIMEOUT_S),
                lambda: process.send_signal(signal.SIGKILL),
                turns,
                questions,
            )
        )
        process.wait(30)
        assert process.returncode == -signal.SIGKILL
    finally:
        process.kill()
        process.wait()
    assert len(acknowledged["ids"]) == 49
    process, url = _start_http(folder, scorer_model, compilation_cache)
    try:
        asyncio.run(
            _second_session(
                lambda: Client(url, read_timeout_seconds=TIMEOUT_S),
                acknowledged,
                questions,
            )
        )
    finally:
        process.terminate()
        process.wait(30)


def test_scorer_flags_are_checked(tmp_path):
    from earm_jax.cli.main import run

    # No scorer flag is similarity mode (served below); two are refused.
    both = ["--scorer-model", str(tmp_path), "--scorer-url", "http://127.0.0.1:9"]
    assert run(["mcp", str(tmp_path), *both]) == 2
    assert run(["mcp", str(tmp_path), "--scorer-name", "m"]) == 2
    assert run(["mcp", str(tmp_path), "--scorer-url", "http://127.0.0.1:9"]) == 2
    assert run(["mcp", str(tmp_path), "--scorer-model", str(tmp_path / "no")]) == 2
    assert run(["mcp", str(tmp_path), "--http", "nonsense"]) == 2
    # HTTP without credentials only on loopback and only when asked.
    for access in (
        ["--http", "127.0.0.1:9"],
        ["--http", "0.0.0.0:9", "--no-auth"],
        ["--http", "[::]:9", "--no-auth"],
        ["--http", "127.0.0.1:9", "--no-auth", "--tokens", str(tmp_path / "t")],
        ["--http", "127.0.0.1:9", "--tokens", str(tmp_path / "missing.json")],
        ["--tokens", str(tmp_path / "t")],
        ["--max-open-tenants", "0"],
    ):
        assert run(["mcp", str(tmp_path / "m"), *access]) == 2, access
    assert not (tmp_path / "m").exists()


def _remember_recall_stop(
    process: subprocess.Popen, url: str, texts: list[str], question: str
) -> tuple[dict, dict]:
    """Remembers ``texts`` over HTTP, recalls 5 for ``question``, reads the
    stats, then stops the server; returns the recall and the stats."""

    async def session() -> tuple[dict, dict]:
        async with Client(url, read_timeout_seconds=TIMEOUT_S) as client:
            for text in texts:
                reply = await client.call_tool("remember", {"text": text})
                assert not reply.is_error, reply.content
            recall = await client.call_tool("recall", {"query": question, "k": 5})
            assert not recall.is_error, recall.content
            stats = await client.call_tool("stats", {})
            return recall.structured_content, stats.structured_content

    try:
        return asyncio.run(session())
    finally:
        process.terminate()
        process.wait(30)


def test_similarity_mode_says_so_and_calls_no_scorer(
    tmp_path, locomo_turns, compilation_cache
):
    from earm_jax.cli.mcp import SIMILARITY_MODE_NOTE

    turns, questions = locomo_turns
    folder = tmp_path / "memory"
    process, url = _start_http(folder, None, compilation_cache)

    recall, stats = _remember_recall_stop(process, url, turns[:20], questions[0])
    (text,) = [path.read_text() for path in folder.parent.glob("server-*.log")]
    assert text.splitlines().count(SIMILARITY_MODE_NOTE) == 1
    assert stats["mode"] == "similarity"
    assert stats["calls_paid"] == 0 and stats["queries"] == 1
    assert recall["calls"] == 0
    scores = [m["score"] for m in recall["memories"]]
    assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)  # best first: by similarity


def test_a_free_order_reaches_the_tenants_and_recall_goes_down_it(
    tmp_path, locomo_turns, compilation_cache
):
    """``--free-order FILE`` (the real build's free order of a fold that never
    saw conversation 26): the tenant is created with it, and a recall in
    similarity mode is the top of that order written out, each memory shown
    the order's probability."""
    import json

    import numpy as np

    from earm_jax.scoring.recorded_answers import RecordedAnswers
    from earm_jax.scoring.word_coverage import word_coverage
    from earm_jax.store.embeddings import Embedder

    require_extra("wordfreq")
    order = RecordedAnswers.load(
        REPO / "experiments/scores/turns-500steps-bf16-coverage-scores.npz"
    ).free_order_of("26")
    file = tmp_path / "free_order.json"
    file.write_text(json.dumps(order.to_json()))
    turns, questions = locomo_turns
    memories = turns[:30]
    folder = tmp_path / "memory"
    process, url = _start_http(
        folder, None, compilation_cache, "--no-auth", "--free-order", str(file)
    )

    recall, stats = _remember_recall_stop(process, url, memories, questions[0])
    assert stats["pool_order"] == "free" and stats["mode"] == "similarity"
    stored, _, _ = _stored(folder / "default")
    assert stored["free_order"] == order.to_json()
    embedder = Embedder(cache_dir=False)
    cosine = embedder.embed(memories) @ embedder.embed([questions[0]])[0]
    key = (
        order.similarity_weight * cosine
        + order.coverage_weight * word_coverage(questions[0], memories)
        + order.shift
    )
    top = np.argsort(-key)[:5]
    assert [m["text"] for m in recall["memories"]] == [memories[i] for i in top]
    shown = [m["score"] for m in recall["memories"]]
    np.testing.assert_allclose(shown, 1 / (1 + np.exp(-key[top])), atol=1e-4)


def test_a_folders_similarity_blend_is_served_unless_asked_not_to(
    tmp_path, scorer_model
):
    """``--scorer-model`` serves what ``earm locomo`` measures: the model's
    answers blended as its folder's similarity_blend.json says (none: the
    model alone); ``--no-scorer-blend`` serves the model alone; a blend fitted
    on another encoder is one line naming the way out."""
    import shutil

    from earm_jax.cli.errors import UserError
    from earm_jax.cli.served_scorer import served_scorer
    from earm_jax.scoring.similarity_blend import (
        BlendedScorer,
        SimilarityBlend,
        write_blend,
    )
    from earm_jax.store.embeddings import Embedder

    model = tmp_path / "model"
    shutil.copytree(scorer_model, model)
    embedder = Embedder(cache_dir=False)

    def served(blend: bool = True):
        return served_scorer(
            model, None, None, "yesno", "torch-float32", embedder, blend
        )

    assert not isinstance(served(), BlendedScorer)  # the folder has no blend
    blend = SimilarityBlend(0.8, 2.0, -1.0, embedder.identity, coverage_weight=3.0)
    write_blend(model, blend)
    blended = served()
    assert isinstance(blended, BlendedScorer) and blended.blend == blend
    assert blended.identity.kind == "cross-encoder+similarity"
    assert not isinstance(served(blend=False), BlendedScorer)
    write_blend(model, SimilarityBlend(0.8, 2.0, -1.0, "another-encoder"))
    with pytest.raises(UserError, match="another-encoder") as refused:
        served()
    assert "--no-scorer-blend" in refused.value.fix


def test_a_weak_trained_scorer_is_refused_unless_forced(
    tmp_path, scorer_model, compilation_cache
):
    from tiny_models import write_scorer_build

    fold = write_scorer_build(tmp_path / "build", scorer_model, 0.3, 0.4)
    folder = tmp_path / "memory"
    refused = subprocess.run(
        _command(folder, fold),
        env=_env(compilation_cache),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "Full Recall@10 0.300 <= Semantic 0.400" in line
    assert "--force-weak-scorer" in line
    assert not folder.exists()
    process, url = _start_http(
        folder, fold, compilation_cache, "--no-auth", "--force-weak-scorer"
    )
    try:

        async def stats() -> dict:
            async with Client(url, read_timeout_seconds=TIMEOUT_S) as client:
                return (await client.call_tool("stats", {})).structured_content

        assert asyncio.run(stats())["mode"] == "scorer"
    finally:
        process.terminate()
        process.wait(30)


def test_mcp_agent_example_answers_over_mcp(
    tmp_path, scorer_model, locomo_path, compilation_cache
):
    example = REPO / "examples" / "mcp_agent.py"
    run = subprocess.run(
        [
            sys.executable,
            str(example),
            "--data",
            str(locomo_path),
            "--scorer-model",
            str(scorer_model),
            "--questions",
            "5",
            "--turns",
            "80",
            "--folder",
            str(tmp_path / "memory"),
        ],
        env=_env(compilation_cache),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "calls paid" in run.stdout and "for the full pool" in run.stdout
    assert run.stdout.count("hit ") + run.stdout.count("miss ") == 5


@contextlib.asynccontextmanager
async def _client(url: str, token: str | None = None):
    """The MCP SDK's client over streamable HTTP, with a bearer token."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=TIMEOUT_S)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, read_timeout_seconds=TIMEOUT_S) as client:
            yield client


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
}


def _one_line_error(reply) -> str:
    assert reply.is_error, reply
    (content,) = reply.content
    assert content.text and "\n" not in content.text, content.text
    return content.text


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _token(run, capsys, tokens: Path, *tenants: str) -> str:
    arguments = ["mcp-token", "add", "--tokens", str(tokens)]
    for tenant in tenants:
        arguments += ["--tenant", tenant]
    capsys.readouterr()
    assert run(arguments) == 0
    return capsys.readouterr().out.strip()


def test_http_tokens_reach_only_their_tenants(
    tmp_path, scorer_model, compilation_cache, capsys
):
    from earm_jax.cli.main import run

    tokens = tmp_path / "tokens.json"
    alice = _token(run, capsys, tokens, "alice")
    bob = _token(run, capsys, tokens, "bob")
    assert alice not in tokens.read_text() and oct(tokens.stat().st_mode)[-3:] == "600"
    folder = tmp_path / "memory"
    process, url = _start_http(
        folder, scorer_model, compilation_cache, "--tokens", str(tokens)
    )
    try:
        # No token, a wrong token: 401 with a Bearer challenge. A valid token
        # with a foreign Host (421) or Origin (403): refused. A JSON-RPC id
        # that is an object: a JSON-RPC error, not accepted and dropped.
        for headers, status in [
            ({}, 401),
            ({"authorization": "Bearer earm_not-a-token"}, 401),
            ({"authorization": f"Bearer {alice}", "host": "evil.example"}, 421),
            (
                {"authorization": f"Bearer {alice}", "origin": "http://evil.example"},
                403,
            ),
        ]:
            response = httpx2.post(url, json=INITIALIZE, headers=ACCEPT | headers)
            assert response.status_code == status, (headers, response.text)
            if status == 401:
                assert response.headers["www-authenticate"].startswith("Bearer ")
        as_alice = ACCEPT | {"authorization": f"Bearer {alice}"}
        response = httpx2.post(url, json=INITIALIZE, headers=as_alice)
        as_alice |= {
            "mcp-session-id": response.headers["mcp-session-id"],
            "mcp-protocol-version": INITIALIZE["params"]["protocolVersion"],
        }
        for message in (
            INITIALIZE | {"id": {"an": "object"}},
            {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"},
        ):
            response = httpx2.post(url, json=message, headers=as_alice)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == -32600 and "id must be" in error["message"]

        async def sessions():
            async with _client(url, bob) as client:
                reply = await client.call_tool("remember", {"text": "Bob's secret."})
                assert not reply.is_error, reply.content
            await asyncio.sleep(1.0)  # let bob's folder settle
            before = _files(folder / "bob")
            async with _client(url, alice) as client:
                reply = await client.call_tool("remember", {"text": "Alice's own."})
                assert not reply.is_error, reply.content
                for name, arguments in [
                    ("recall", {"query": "secret", "k": 1}),
                    ("get", {"ids": [0]}),
                    ("forget", {"ids": [0]}),
                    ("update", {"id": 0, "text": "overwritten"}),
                    ("remember", {"text": "planted"}),
                    ("stats", {}),
                ]:
                    reply = await client.call_tool(name, arguments | {"tenant": "bob"})
                    assert "refused" in _one_line_error(reply), name
                reply = await client.call_tool(
                    "remember", {"text": "x", "tenant": "eve"}
                )
                assert "refused" in _one_line_error(reply)
                reply = await client.call_tool("get", {"ids": [0]})
                (memory,) = reply.structured_content["memories"]
                assert memory["text"] == "Alice's own."
            assert _files(folder / "bob") == before

        asyncio.run(sessions())
        assert not (folder / "eve").exists()
        assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
            "alice",
            "bob",
        ]
    finally:
        process.terminate()
        process.wait(30)


def _open_tenants(pid: int, folder: Path) -> set[str]:
    """The tenant folders whose files the server process holds open."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if folder in target.parents and target.parent != folder:
            held.add(target.relative_to(folder).parts[0])
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_http_thousand_tenant_names_stay_bounded(
    tmp_path, scorer_model, compilation_cache
):
    folder = tmp_path / "memory"
    process, url = _start_http(
        folder,
        scorer_model,
        compilation_cache,
        "--no-auth",
        "--max-open-tenants",
        "3",
        "--max-tenants",
        "12",
    )
    most_open = 0
    try:

        async def many():
            nonlocal most_open
            async with _client(url) as client:
                reply = await client.call_tool(
                    "remember", {"text": "kept across closes", "tenant": "t0"}
                )
                assert not reply.is_error, reply.content
                for number in range(1000):
                    reply = await client.call_tool("stats", {"tenant": f"t{number}"})
                    # "default" (opened at start) and t0..t10 fill the 12 folders.
                    if number <= 10:
                        assert not reply.is_error, (number, reply.content)
                    else:
                        assert "max_tenants=12" in _one_line_error(reply), number
                    if number % 10 == 0 or number < 15:
                        open_now = _open_tenants(process.pid, folder)
                        most_open = max(most_open, len(open_now))
                        assert len(open_now) <= 3, (number, open_now)
                reply = await client.call_tool("get", {"ids": [0], "tenant": "t0"})
                (memory,) = reply.structured_content["memories"]
                assert memory["text"] == "kept across closes"
                # An argument of the wrong type: one line naming it.
                reply = await client.call_tool("recall", {"query": "q", "k": "five"})
                assert "argument k" in _one_line_error(reply)

        asyncio.run(many())
        assert 1 <= most_open <= 3
        tenant_folders = [p for p in folder.iterdir() if p.is_dir()]
        assert len(tenant_folders) == 12
        # A second server on the folder: one line, exit 2.
        second = subprocess.run(
            _command(folder, scorer_model),
            env=_env(compilation_cache),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert second.returncode == 2, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith("error: ") and "in use" in line and " — " in line
        assert str(process.pid) in line
    finally:
        process.terminate()
        process.wait(30)


def test_retriever_flags_are_checked_before_the_server_starts(tmp_path, capsys):
    from earm_jax.cli.main import run
    from earm_jax.cli.mcp import PRESETS, QUERY_RETENTIONS
    from earm_jax.retriever import config

    # The CLI's copies (--help imports no JAX) agree with the retriever's.
    assert PRESETS == config.RETRIEVER_PRESETS
    assert QUERY_RETENTIONS == config.QUERY_RETENTIONS
    folder = tmp_path / "memory"
    loose = tmp_path / "loose.key"
    loose.write_text("00" * 32 + "\n")
    loose.chmod(0o644)
    for flags, says in (
        (["--preset", "learned_calls", "--query-retention", "none"], "keeps nothing"),
        (["--query-retention", "none"], "--preset best pays where"),
        (["--preset", "fancy"], "--preset must be one of"),
        (["--query-retention", "forever"], "--query-retention must be one of"),
        (["--free-order", str(tmp_path / "nowhere")], "does not exist"),
        (["--key-file", str(folder / "tenants.key")], "is inside"),
        (["--key-file", str(loose)], "can be read or written by others"),
    ):
        capsys.readouterr()
        assert run(["mcp", str(folder), *flags]) == 2, flags
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: ") and " — " in line and says in line, line
    assert not folder.exists()
    # A new key for a folder that holds tenants would open none of them.
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "journal.sqlite").write_bytes(b"a tenant's journal")
    capsys.readouterr()
    assert run(["mcp", str(folder), "--key-file", str(tmp_path / "new.key")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "does not exist" in line and "alice" in line, line
    assert not (tmp_path / "new.key").exists()


def _stored(tenant: Path) -> tuple[dict, dict, list[str]]:
    """A tenant folder's stored config, runtime options, and the query texts
    its records keep (read with SQLite, as they lie on disk)."""
    import json
    import sqlite3

    connection = sqlite3.connect(f"file:{tenant / 'journal.sqlite'}?mode=ro", uri=True)
    try:
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
        payloads = connection.execute(
            "SELECT payload FROM ops WHERE kind = 'query'"
        ).fetchall()
    finally:
        connection.close()
    texts = [json.loads(p).get("text") for (p,) in payloads]
    return (
        json.loads(meta["config"]),
        json.loads(meta["runtime"]),
        [t for t in texts if t is not None],
    )


def test_preset_query_retention_and_key_file_reach_every_tenant(
    tmp_path, scorer_model, compilation_cache
):
    from earm_jax.retriever import check

    folder = tmp_path / "memory"
    key = tmp_path / "keys" / "tenants.key"
    key.parent.mkdir()
    question = "Who plays chess on Fridays?"

    async def session(url: str, tenants: list[str | None]) -> None:
        async with _client(url) as client:
            for tenant in tenants:
                named = {} if tenant is None else {"tenant": tenant}
                for text in ("Sam plays chess.", "Ann paints.", "Cy swims."):
                    reply = await client.call_tool("remember", {"text": text} | named)
                    assert not reply.is_error, reply.content
                reply = await client.call_tool("recall", {"query": question} | named)
                assert not reply.is_error, reply.content
                assert reply.structured_content["memories"]

    process, url = _start_http(
        folder,
        scorer_model,
        compilation_cache,
        "--no-auth",
        "--preset",
        "learned_calls",
        "--query-retention",
        "keep",
        "--key-file",
        str(key),
    )
    try:
        asyncio.run(session(url, [None, "alice"]))
    finally:
        process.terminate()
        process.wait(30)
    log = next(folder.parent.glob("server-*.log")).read_text()
    assert f"created key file {key}" in log
    assert oct(key.stat().st_mode)[-3:] == "600"
    for name in ("default", "alice"):
        stored, runtime, texts = _stored(folder / name)
        assert stored["preset"] == "learned_calls", name
        assert runtime["query_retention"] == "keep" and texts == [question], name
        assert check(folder / name, key_file=key).ok, name
        unkeyed = check(folder / name)
        assert not unkeyed.ok and "is keyed" in unkeyed.problems[0], name

    # Restarted without --preset and with another retention: the tenants keep
    # their preset and open with the key; the retention reaches them too (the
    # query texts kept before are dropped when each opens).
    process, url = _start_http(
        folder,
        scorer_model,
        compilation_cache,
        "--no-auth",
        "--query-retention",
        "hash-only",
        "--key-file",
        str(key),
    )
    try:
        asyncio.run(session(url, ["alice"]))
    finally:
        process.terminate()
        process.wait(30)
    for name in ("default", "alice"):
        stored, runtime, texts = _stored(folder / name)
        assert stored["preset"] == "learned_calls", name
        assert runtime["query_retention"] == "hash-only" and texts == [], name
        assert check(folder / name, key_file=key).ok, name

    # Without the key, the keyed tenants do not open: one line, exit 2.
    refused = subprocess.run(
        _command(folder, scorer_model),
        env=_env(compilation_cache),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: ") and "is keyed" in line and "--key-file" in line
