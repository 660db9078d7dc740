"""A tiny local HTTP server for fault injection only (5xx, 429, hang, garbage,
dropped connections). The real-server tests use real vLLM; this stub never
stands in for it when checking scores."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

YES_ID, NO_ID = 11, 12

# A behaviour takes (path, request JSON, number of earlier POSTs to that path)
# and returns (status, body bytes, headers) or the strings "hang" / "drop".
Behaviour = Callable[[str, dict[str, Any], int], Any]


def yesno_completion(body: dict[str, Any], yes_logprob: float = -1.0) -> bytes:
    """A vLLM-shaped completion reply giving every prompt the same logprobs."""
    prompts = body["prompt"]
    choices = [
        {
            "index": index,
            "text": " yes",
            "logprobs": {
                "top_logprobs": [
                    {f"token_id:{YES_ID}": yes_logprob, f"token_id:{NO_ID}": -2.0}
                ]
            },
        }
        for index in range(len(prompts))
    ]
    return json.dumps({"choices": choices}).encode()


def expected_yes(yes_logprob: float = -1.0) -> float:
    return 1.0 / (1.0 + math.exp(-(yes_logprob + 2.0)))


class StubServer:
    """Serves /v1/models, /version and /tokenize like vLLM; POST replies follow
    ``behaviour``. Counts POSTs per path and prompts received."""

    def __init__(
        self,
        behaviour: Behaviour,
        model: str = "stub-model",
        has_tokenize: bool = True,
        models_status: int = 200,
    ) -> None:
        self.behaviour = behaviour
        self.models_status = models_status
        self.has_tokenize = has_tokenize
        self.model = model
        self.post_counts: dict[str, int] = {}
        self.prompts_received = 0
        self.release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models" and stub.models_status == 401:
                    # vLLM's reply to a missing or wrong --api-key.
                    self._send(401, b'{"error": "Unauthorized"}')
                elif self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": stub.model}]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "stub"}')
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/tokenize" and not stub.has_tokenize:
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                if self.path == "/tokenize":
                    token = {" yes": YES_ID, " no": NO_ID}.get(body.get("prompt"), 99)
                    self._send(200, json.dumps({"tokens": [token]}).encode())
                    return
                count = stub.post_counts.get(self.path, 0)
                stub.post_counts[self.path] = count + 1
                prompts = body.get("prompt", [])
                stub.prompts_received += (
                    len(prompts) if isinstance(prompts, list) else 1
                )
                outcome = stub.behaviour(self.path, body, count)
                if outcome == "hang":
                    stub.release.wait(timeout=30.0)
                    return
                if outcome == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, payload, *rest = outcome
                self._send(status, payload, rest[0] if rest else None)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
        time.sleep(0)
