"""``earm mcp --http``: who may call the memory server over HTTP, and for
which tenant.

* **Bearer tokens bound to tenants.** A token file (JSON, created 0600) maps
  the SHA-256 of each token to the tenants it may use; the tokens themselves
  are never stored. :func:`add_token` makes one (``secrets.token_urlsafe``, 256
  random bits) and returns it once. A plain SHA-256 is enough because the
  tokens are random: there is no password to guess, so no salt or slow hash
  would add anything. :class:`TokenFileVerifier` is the MCP SDK's
  ``TokenVerifier`` over that file (re-read when it changes, so a token added
  or revoked takes effect without a restart); the SDK's bearer middleware
  answers a request with no valid token ``401`` with ``WWW-Authenticate:
  Bearer``, and the tools refuse a tenant the token does not list.
* **Host and Origin checked on every bind address** (DNS rebinding): the SDK
  turns its check on only for 127.0.0.1, localhost and ::1; here
  :func:`transport_security` turns it on for every address, allowing the
  loopback names, the bound address and the names passed as ``allowed_hosts``.
* **JSON-RPC ids checked**: a request whose ``id`` is not a string or an
  integer gets a JSON-RPC ``Invalid Request`` error (:class:`JsonRpcIdCheck`)
  instead of being accepted and dropped.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecuritySettings,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from earm_jax.retriever.tenants import tenant_folder

TOKEN_FORMAT = "earm-mcp-tokens/1"
TOKEN_PREFIX = "earm_"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class TokenFileError(ValueError):
    """A token file that cannot be used (missing, unreadable by its format,
    or readable by other users)."""


def token_digest(token: str) -> str:
    """The SHA-256 (hex) a token file keeps of ``token``.

    >>> len(token_digest("earm_x")), token_digest("earm_x") == token_digest("earm_x")
    (64, True)
    """
    return hashlib.sha256(token.encode()).hexdigest()


def _empty() -> dict[str, Any]:
    return {"format": TOKEN_FORMAT, "tokens": []}


def read_tokens(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The token file at ``path`` (its entries: ``id``, ``sha256``, ``tenants``,
    ``created``).

    Raises:
      TokenFileError: missing, not a token file, or readable by other users.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
        data = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise TokenFileError(f"no token file at {path}") from error
    except (OSError, ValueError) as error:
        raise TokenFileError(
            f"{path} is not a readable token file ({error})"
        ) from error
    if mode & 0o077:
        raise TokenFileError(
            f"{path} is readable by other users (mode {mode & 0o777:04o}); "
            f"chmod 600 {path}"
        )
    if not isinstance(data, dict) or data.get("format") != TOKEN_FORMAT:
        raise TokenFileError(f"{path} is not an earm token file ({TOKEN_FORMAT})")
    for entry in data.get("tokens", []):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("tenants"), list)
            and entry["tenants"]
        ):
            raise TokenFileError(f"{path}: a token entry has no sha256 or tenants")
    return data


def _write_tokens(path: Path, data: dict[str, Any]) -> None:
    """Replaces ``path`` atomically with ``data``, mode 0600 from creation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as sink:
            json.dump(data, sink, indent=1)
            sink.write("\n")
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def add_token(path: str | os.PathLike[str], tenants: list[str]) -> tuple[str, str]:
    """Adds a new random token for ``tenants`` (the first is the default of
    calls that name none) to the token file at ``path`` (created 0600 if
    missing). Returns ``(token_id, token)``: the token is shown only now,
    the file keeps its SHA-256."""
    if not tenants:
        raise ValueError("a token needs at least one tenant")
    for tenant in tenants:
        tenant_folder(".", tenant)  # checks the name
    path = Path(path)
    data = read_tokens(path) if path.exists() else _empty()
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    digest = token_digest(token)
    token_id = digest[:12]
    data["tokens"].append(
        {
            "id": token_id,
            "sha256": digest,
            "tenants": list(dict.fromkeys(tenants)),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    _write_tokens(path, data)
    return token_id, token


def revoke_token(path: str | os.PathLike[str], token_id: str) -> list[str]:
    """Removes the token ``token_id`` from the file; returns its tenants.

    Raises:
      KeyError: no token has that id.
    """
    path = Path(path)
    data = read_tokens(path)
    kept = [e for e in data["tokens"] if e.get("id") != token_id]
    if len(kept) == len(data["tokens"]):
        raise KeyError(f"no token with id {token_id!r} in {path}")
    (gone,) = [e for e in data["tokens"] if e.get("id") == token_id]
    data["tokens"] = kept
    _write_tokens(path, data)
    return gone["tenants"]


class TokenFileVerifier(TokenVerifier):
    """The MCP SDK's token verifier over a token file: a token is valid when
    its SHA-256 is in the file; its ``AccessToken.claims["tenants"]`` lists
    the tenants it may use. The file is read again when it changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self._by_digest: dict[str, dict[str, Any]] = {}
        self._load()

    def _load(self) -> None:
        try:
            status = self.path.stat()
        except FileNotFoundError as error:
            raise TokenFileError(f"no token file at {self.path}") from error
        seen = (status.st_ino, status.st_mtime_ns, status.st_size)
        if seen == self._seen:
            return
        data = read_tokens(self.path)
        self._by_digest = {e["sha256"]: e for e in data["tokens"]}
        self._seen = seen

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            self._load()
        except (OSError, ValueError):
            pass  # a file being replaced or broken: keep the last good tokens
        entry = self._by_digest.get(token_digest(token))
        if entry is None:
            return None
        return AccessToken(
            token=token,
            client_id=f"earm-token-{entry.get('id', '')}",
            subject=entry["sha256"],
            scopes=[],
            claims={"tenants": list(entry["tenants"])},
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``).

    >>> [is_loopback(h) for h in ("127.0.0.2", "::1", "localhost", "0.0.0.0")]
    [True, True, True, False]
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_forms(host: str) -> list[str]:
    """``host`` as a Host header spells it (IPv6 in brackets)."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return [f"[{host}]"]
    except ValueError:
        pass
    return [host]


def transport_security(
    host: str, allowed_hosts: list[str] | tuple[str, ...] = ()
) -> TransportSecuritySettings:
    """Host/Origin checks for a server bound to ``host``, on for every
    address: the loopback names, ``host`` itself (unless it is a wildcard such
    as 0.0.0.0 or ::) and ``allowed_hosts`` (names clients use to reach it,
    e.g. a reverse proxy's), each with any port or none.

    >>> transport_security("0.0.0.0", ["mem.example.org"]).allowed_hosts[3:5]
    ['mem.example.org:*', '127.0.0.1']
    """
    names: list[str] = []
    for name in (*LOOPBACK_NAMES, host, *allowed_hosts):
        try:
            if ipaddress.ip_address(name).is_unspecified:
                continue
        except ValueError:
            pass
        for form in _host_forms(name.strip("[]")):
            if form not in names:
                names.append(form)
    hosts = [f"{n}:*" for n in names] + names
    origins = [
        f"{scheme}://{n}{port}"
        for n in names
        for scheme in ("http", "https")
        for port in (":*", "")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=origins,
    )


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def _bad_id(body: bytes) -> str | None:
    """What is wrong with a JSON-RPC message's ``id`` in ``body`` (``None``:
    nothing, or not JSON: the SDK answers that)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    for message in parsed if isinstance(parsed, list) else [parsed]:
        if isinstance(message, dict) and "id" in message:
            value = message["id"]
            if not _valid_id(value):
                kind = {dict: "an object", list: "an array", float: "a fraction"}
                name = "null" if value is None else kind.get(type(value), "a boolean")
                return f"Invalid Request: id must be a string or an integer, not {name}"
    return None


class JsonRpcIdCheck:
    """ASGI middleware: a POSTed JSON-RPC message whose ``id`` is not a string
    or an integer is answered ``400`` with a JSON-RPC error (code -32600)."""

    def __init__(
        self, app: ASGIApp, max_body_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE
    ) -> None:
        self.app = app
        self.max_body_size = max_body_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        messages: list[Message] = []
        while more:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body_size:
                break  # the SDK's own limit answers 413
        problem = None if more else _bad_id(b"".join(chunks))
        if problem is not None:
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32600, "message": problem},
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def http_app(
    server: MCPServer, host: str, allowed_hosts: list[str] | tuple[str, ...] = ()
) -> ASGIApp:
    """The streamable-HTTP ASGI app of ``server`` (at ``/mcp``) for a bind to
    ``host``: Host/Origin checked (:func:`transport_security`), JSON-RPC ids
    checked, and bearer tokens required where ``server`` was built with a
    token verifier."""
    starlette_app = server.streamable_http_app(
        host=host, transport_security=transport_security(host, allowed_hosts)
    )
    return JsonRpcIdCheck(starlette_app)


def serve_http(
    server: MCPServer,
    host: str,
    port: int,
    allowed_hosts: list[str] | tuple[str, ...] = (),
) -> None:
    """Serves :func:`http_app` at ``http://host:port/mcp`` until interrupted."""
    import anyio
    import uvicorn

    config = uvicorn.Config(
        http_app(server, host, allowed_hosts),
        host=host,
        port=port,
        log_level=server.settings.log_level.lower(),
    )
    anyio.run(uvicorn.Server(config).serve)


__all__ = [
    "TOKEN_FORMAT",
    "JsonRpcIdCheck",
    "TokenFileError",
    "TokenFileVerifier",
    "add_token",
    "http_app",
    "is_loopback",
    "read_tokens",
    "revoke_token",
    "serve_http",
    "token_digest",
    "transport_security",
]
