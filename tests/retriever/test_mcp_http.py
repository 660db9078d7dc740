"""``earm mcp --http``'s access control, in process (the ASGI app under
Starlette's test client: no socket, no traffic): token files, 401 without a
valid bearer token, a token's tenants only, Host/Origin refused for every kind
of bind address, JSON-RPC ids of the wrong type, one-line argument errors.
The same over a real server on 127.0.0.1: tests/cli/test_mcp.py."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from starlette.testclient import TestClient  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer  # noqa: E402

from earm_jax.retriever.mcp_http import (  # noqa: E402
    TokenFileError,
    TokenFileVerifier,
    add_token,
    http_app,
    read_tokens,
    revoke_token,
    token_digest,
)
from earm_jax.retriever.mcp_server import build_server  # noqa: E402
from earm_jax.retriever.tenants import TenantRetrievers  # noqa: E402

VERSION = "2025-06-18"
ACCEPT = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
}


def _initialize(id_: object = 1) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }


def _reply(response) -> dict:
    """The JSON-RPC message of a JSON or an SSE response."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    (data,) = [line for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(data[len("data:") :])


@pytest.fixture
def tokens(tmp_path):
    path = tmp_path / "tokens.json"
    alice = add_token(path, ["alice"])[1]
    bob = add_token(path, ["bob", "shared"])[1]
    return path, alice, bob


@pytest.fixture
def tenants(tmp_path):
    with TenantRetrievers(
        tmp_path / "memory", KeywordScorer(), HashEmbedder(), CONFIG, max_open=2
    ) as opened:
        yield opened


def _app(tenants, tokens_path, host="127.0.0.1", allowed=()):
    verifier = None if tokens_path is None else TokenFileVerifier(tokens_path)
    server = build_server(tenants, token_verifier=verifier)
    return http_app(server, host, allowed)


def test_token_file_keeps_only_hashes_and_is_private(tokens):
    path, alice, bob = tokens
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert alice not in text and bob not in text
    assert token_digest(alice) in text and token_digest(bob) in text
    assert alice.startswith("earm_") and len(alice) > 40 and alice != bob
    entries = read_tokens(path)["tokens"]
    assert [e["tenants"] for e in entries] == [["alice"], ["bob", "shared"]]
    # Revoked: gone from the file, and a verifier reading it refuses it.
    verifier = TokenFileVerifier(path)
    assert revoke_token(path, entries[0]["id"]) == ["alice"]
    import asyncio

    assert asyncio.run(verifier.verify_token(alice)) is None
    granted = asyncio.run(verifier.verify_token(bob))
    assert granted.claims["tenants"] == ["bob", "shared"]
    with pytest.raises(KeyError):
        revoke_token(path, entries[0]["id"])
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="readable by other users"):
        read_tokens(path)
    with pytest.raises(ValueError, match="tenant must be"):
        add_token(path.with_name("other.json"), ["../escape"])
    assert not path.with_name("other.json").exists()


def test_no_valid_token_is_401(tenants, tokens):
    path, alice, _ = tokens
    with TestClient(_app(tenants, path), base_url="http://127.0.0.1:8765") as client:
        for headers in [{}, {"authorization": "Bearer earm_wrong"}]:
            response = client.post("/mcp", json=_initialize(), headers=ACCEPT | headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer ")
        headers = ACCEPT | {"authorization": f"Bearer {alice}"}
        response = client.post("/mcp", json=_initialize(), headers=headers)
        assert response.status_code == 200, response.text
    assert not tenants.tenants()  # nothing opened for the refused


def _session(client, token: str) -> dict:
    headers = ACCEPT | {"authorization": f"Bearer {token}"}
    response = client.post("/mcp", json=_initialize(), headers=headers)
    assert response.status_code == 200, response.text
    headers |= {
        "mcp-session-id": response.headers["mcp-session-id"],
        "mcp-protocol-version": VERSION,
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post("/mcp", json=note, headers=headers).status_code == 202
    return headers


def _call(client, headers, name, arguments, id_=7) -> dict:
    message = {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    response = client.post("/mcp", json=message, headers=headers)
    assert response.status_code == 200, response.text
    return _reply(response)["result"]


def test_a_token_reaches_only_its_tenants(tenants, tokens):
    path, alice, bob = tokens
    memory = tenants.root
    with TestClient(_app(tenants, path), base_url="http://127.0.0.1:8765") as client:
        as_bob = _session(client, bob)
        result = _call(client, as_bob, "remember", {"text": "Bob's secret."})
        assert not result["isError"], result
        assert _call(client, as_bob, "remember", {"text": "x", "tenant": "shared"})
        before = {p: p.read_bytes() for p in (memory / "bob").rglob("*")}
        as_alice = _session(client, alice)
        for name, arguments in [
            ("recall", {"query": "secret", "tenant": "bob"}),
            ("get", {"ids": [0], "tenant": "bob"}),
            ("forget", {"ids": [0], "tenant": "bob"}),
            ("update", {"id": 0, "text": "changed", "tenant": "bob"}),
            ("remember", {"text": "planted", "tenant": "bob"}),
            ("stats", {"tenant": "shared"}),
            ("remember", {"text": "new folder?", "tenant": "carol"}),
        ]:
            result = _call(client, as_alice, name, arguments)
            assert result["isError"], (name, result)
            (content,) = result["content"]
            assert "refused" in content["text"] and "\n" not in content["text"]
            assert "alice" in content["text"]
        after = {p: p.read_bytes() for p in (memory / "bob").rglob("*")}
        assert after == before
        assert not (memory / "carol").exists()
        # Without a tenant, a call goes to the token's first one.
        result = _call(client, as_alice, "remember", {"text": "Alice's own."})
        assert not result["isError"], result
        assert tenants.tenants() == ["alice", "bob", "shared"]
        # A session belongs to the token that opened it.
        stolen = as_bob | {"authorization": f"Bearer {alice}"}
        message = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
        assert client.post("/mcp", json=message, headers=stolen).status_code == 404


def test_argument_type_errors_are_one_line_naming_the_argument(tenants, tokens):
    path, alice, _ = tokens
    with TestClient(_app(tenants, path), base_url="http://127.0.0.1:8765") as client:
        headers = _session(client, alice)
        for name, arguments, argument in [
            ("recall", {"query": "q", "k": "five"}, "k"),
            ("forget", {"ids": "all"}, "ids"),
            ("remember", {"text": ["a", "b"]}, "text"),
        ]:
            result = _call(client, headers, name, arguments)
            assert result["isError"]
            (content,) = result["content"]
            assert "\n" not in content["text"], content["text"]
            assert f"argument {argument}" in content["text"], content["text"]


@pytest.mark.parametrize("bad", [{"a": 1}, [1], True, 1.5, None])
def test_json_rpc_id_of_the_wrong_type_is_a_json_rpc_error(tenants, tokens, bad):
    path, alice, _ = tokens
    with TestClient(_app(tenants, path), base_url="http://127.0.0.1:8765") as client:
        headers = ACCEPT | {"authorization": f"Bearer {alice}"}
        response = client.post("/mcp", json=_initialize(bad), headers=headers)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == -32600 and "id must be" in error["message"]
        headers = _session(client, alice)
        ping = {"jsonrpc": "2.0", "id": bad, "method": "ping"}
        response = client.post("/mcp", json=ping, headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32600


@pytest.mark.parametrize(
    "bind", ["127.0.0.1", "127.0.0.2", "0.0.0.0", "::", "::1", "mem.example.org"]
)
def test_foreign_host_and_origin_are_refused_on_every_bind(tenants, tokens, bind):
    path, alice, _ = tokens
    app = _app(tenants, path, bind, allowed=["mem.example.org"])
    token = {"authorization": f"Bearer {alice}"}
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        for host, origin, status in [
            ("evil.example:8765", None, 421),
            ("evil.example", None, 421),
            ("127.0.0.1:8765", "http://evil.example", 403),
            ("127.0.0.1:8765", "http://evil.example:8765", 403),
            ("127.0.0.1:8765", None, 200),
            ("localhost:8765", "http://localhost:8765", 200),
            ("mem.example.org", "https://mem.example.org", 200),
            ("mem.example.org:8765", None, 200),
        ]:
            headers = ACCEPT | token | {"host": host}
            headers |= {"origin": origin} if origin else {}
            response = client.post("/mcp", json=_initialize(), headers=headers)
            assert response.status_code == status, (bind, host, origin, response.text)
